"""The TPU backend's probe and platform rules (each case in a fresh process: JAX's platform and device count
are fixed when it starts): unavailable without TPU devices, with the reason; JAX's CPU devices only when
`TGI_JAX_PLATFORM=cpu` asks, which it says; too few devices for --num-shard refused with the remedy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json
from tgi.core.plugins import BackendRegistry
registry = BackendRegistry(allow=["cpu", "tpu"])
result = registry.probe("tpu")
spec = next(e.spec for e in registry.entries() if e.name == "tpu")
print(json.dumps([result.available, result.reason, spec.priority, registry.select("auto").name]))
"""


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("TGI_JAX_PLATFORM", "XLA_FLAGS")}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**environ, **env}
    )


# libtpu "installed": the probe goes on to ask JAX for its TPU devices
WITH_LIBTPU = """
import importlib.machinery, importlib.util
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: (
    importlib.machinery.ModuleSpec("libtpu", None) if name == "libtpu" else _find_spec(name, *a)
)
"""


def test_without_tpu_devices_the_probe_says_why_and_never_falls_back() -> None:
    out = _run(WITH_LIBTPU + PROBE)
    available, reason, priority, auto = json.loads(out.stdout.strip().splitlines()[-1])
    assert not available and "no JAX tpu devices" in reason and "TGI_JAX_PLATFORM=cpu" in reason
    assert priority == 20 and auto == "cpu"


def test_without_the_tpu_runtime_the_probe_says_so_without_importing_jax() -> None:
    out = _run(PROBE + "import sys; print(json.dumps('jax' in sys.modules))")
    lines = out.stdout.strip().splitlines()
    available, reason, priority, auto = json.loads(lines[-2])
    assert not available and "libtpu" in reason and "TGI_JAX_PLATFORM=cpu" in reason
    assert priority == 20 and auto == "cpu"
    assert json.loads(lines[-1]) is False  # a start-up on a machine without TPUs does not import JAX


def test_cpu_devices_only_when_asked_and_said() -> None:
    out = _run(PROBE, TGI_JAX_PLATFORM="cpu")
    available, reason, priority, auto = json.loads(out.stdout.strip().splitlines()[-1])
    assert available and reason.endswith("on CPU devices (TGI_JAX_PLATFORM=cpu: not a TPU)")
    assert priority == -1 and auto == "cpu"  # auto never picks JAX-on-CPU over the torch CPU backend


def test_another_platform_is_refused(monkeypatch) -> None:
    from tgi.backends.tpu.platform import PlatformError, requested_platform

    monkeypatch.setenv("TGI_JAX_PLATFORM", "gpu")
    with pytest.raises(PlatformError, match="TGI_JAX_PLATFORM='gpu'"):
        requested_platform()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}, "XLA_FLAGS forces 2"),
        ({}, "JAX was started with 1"),
    ],
)
def test_too_few_cpu_devices_for_the_shards_is_refused(env: dict, message: str) -> None:
    code = (
        "import jax\nfrom tgi.backends.tpu.backend import TpuBackend\n"
        "b = TpuBackend(platform='cpu', cache_dir='/tmp/tgi-tests-jax-cache')\n"
        + ("jax.devices()\n" if not env else "")  # JAX already started with one device
        + "b.prepare_devices(3)\n"
    )
    out = _run(code, **env)
    assert out.returncode != 0 and message in out.stderr and "--num-shard 3" in out.stderr


def test_shards_make_their_cpu_devices_before_jax_starts() -> None:
    code = (
        "import jax\nfrom tgi.backends.tpu.backend import TpuBackend\n"
        "b = TpuBackend(platform='cpu', cache_dir='/tmp/tgi-tests-jax-cache')\nb.prepare_devices(3)\n"
        "print(len(jax.devices('cpu')), b.describe_kernels('float32')['devices'])\n"
    )
    out = _run(code)
    assert out.stdout.strip().splitlines()[-1] == "3 3 JAX CPU devices for --num-shard 3", out.stderr


_SETTINGS = dict(
    hidden_size=96, intermediate_size=96, num_attention_heads=6, num_key_value_heads=3,
    architectures=["LlamaForCausalLM"],
)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"architectures": ["GemmaForCausalLM"]}, "this checkpoint is GemmaForCausalLM"),
        ({"architectures": ["MistralForCausalLM"], "sliding_window": 64}, "no sliding-window attention"),
        ({"hidden_act": "gelu"}, "not gelu"),
        (
            {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
            "longrope",
        ),
        ({"num_attention_heads": 5, "num_key_value_heads": 5, "hidden_size": 80}, "5 attention heads"),
    ],
)
def test_what_the_jax_model_cannot_run_is_refused_with_the_reason(change: dict, message: str) -> None:
    from transformers import LlamaConfig

    from tgi.backends.tpu.weights import ModelDims
    from tgi.core.interfaces import UnsupportedError

    config = LlamaConfig(**{**_SETTINGS, "max_position_embeddings": 128, **change})
    with pytest.raises(UnsupportedError, match=message):
        ModelDims.from_config(config).check_shards(3)
    ModelDims.from_config(LlamaConfig(**_SETTINGS)).check_shards(3)  # the same without the change runs
