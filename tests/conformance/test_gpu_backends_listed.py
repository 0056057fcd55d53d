"""`tgi backends` lists the cuda and rocm plugins, and says why they cannot run on this machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tgi.core.plugins import BackendRegistry, BackendSelectionError


def test_registry_reports_cuda_and_rocm_unavailable_with_reason():
    registry = BackendRegistry(allow=["cpu", "cuda", "rocm"])
    assert {"cpu", "cuda", "rocm"} <= set(registry.names())
    cuda, rocm = registry.probe("cuda"), registry.probe("rocm")
    if not torch.cuda.is_available():
        assert not cuda.available and not rocm.available
        assert cuda.reason and rocm.reason
        if torch.version.cuda is None and not getattr(torch.version, "hip", None):
            assert cuda.reason == f"PyTorch was built without CUDA (torch {torch.__version__})"
            assert rocm.reason == f"PyTorch was built without ROCm/HIP (torch {torch.__version__})"
        with pytest.raises(BackendSelectionError, match="backend 'cuda' is not available: "):
            registry.select("cuda")
        assert registry.select("auto").name == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")
def test_tgi_backends_command_lists_them():
    env = dict(os.environ, TGI_PLUGINS="cpu,cuda,rocm")
    out = subprocess.run(
        [sys.executable, "-m", "tgi.server.cli.main", "backends"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    for name in ("cuda", "rocm"):
        assert name in rows and rows[name].split()[3] == "no", out.stdout
    if torch.version.cuda is None:
        assert "PyTorch was built without CUDA" in rows["cuda"]
    assert "selected (auto): cpu" in out.stdout


def test_attention_selection_never_switches_silently():
    from tgi.backends.triton_common.attention import TritonAttention, create_attention
    from tgi.core.interfaces import UnsupportedError

    assert isinstance(create_attention("triton"), TritonAttention)
    with pytest.raises(UnsupportedError, match="unknown attention 'nosuch'"):
        create_attention("nosuch")
    for name in ("flash-attn", "flashinfer"):  # not installed here, or not implemented: an error either way
        with pytest.raises(UnsupportedError, match=f"attention '{name}'"):
            create_attention(name)


def test_graph_batch_sizes():
    from tgi.backends.triton_common.graphs import graph_batch_sizes

    assert graph_batch_sizes(1) == [1]
    assert graph_batch_sizes(20) == [1, 2, 4, 8, 16, 20]
    assert graph_batch_sizes(256)[-3:] == [240, 248, 256]
