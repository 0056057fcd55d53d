"""`tgi backends` lists the seven in-tree backends with honest availability, and `--backend gaudi`,
`neuron` or `xpu` fails at start on this machine with the probe's reason (no model is loaded)."""

from __future__ import annotations

import pytest

from tgi.core.plugins import BackendRegistry, BackendSelectionError
from tgi.server.cli.main import main

SEVEN = ("cpu", "cuda", "rocm", "tpu", "gaudi", "neuron", "xpu")
REASONS = {
    "gaudi": "habana_frameworks is not installed",
    "neuron": "torch_neuronx is not installed",
    "xpu": "PyTorch was built without XPU support",
}


def _accelerator_free() -> bool:
    import torch

    return not torch.cuda.is_available() and not torch.xpu.is_available()


pytestmark = pytest.mark.skipif(not _accelerator_free(), reason="an accelerator is visible here")


def test_registry_lists_seven_backends_and_refuses_the_unavailable_by_reason():
    registry = BackendRegistry(allow=list(SEVEN))
    assert set(registry.names()) == set(SEVEN)
    for name, reason in REASONS.items():
        result = registry.probe(name)
        assert not result.available and result.reason.startswith(reason), result
        with pytest.raises(BackendSelectionError, match=f"backend '{name}' is not available: {reason}"):
            registry.select(name)


@pytest.fixture(autouse=True)
def _all_seven(monkeypatch):
    monkeypatch.setenv("TGI_PLUGINS", ",".join(SEVEN))  # tests/conftest.py allows the cpu alone


def test_tgi_backends_command(capsys):
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line for line in out.splitlines()[1:] if line.strip() and not line.startswith(" ")
    }
    assert set(SEVEN) <= set(rows)
    assert rows["cpu"].split()[3] == "yes"
    for name in ("cuda", "rocm", "tpu", "gaudi", "neuron", "xpu"):
        assert rows[name].split()[3] == "no", rows[name]
    for name, reason in REASONS.items():
        assert reason in rows[name]


@pytest.mark.parametrize("name", sorted(REASONS))
def test_launch_with_the_backend_fails_at_once_with_the_reason(name, capsys, tmp_path):
    code = main(["launch", "--backend", name, "--model-id", str(tmp_path / "no-model"), "--port", "0"])
    err = capsys.readouterr().err
    assert code == 2 and f"error: backend '{name}' is not available: {REASONS[name]}" in err, err
