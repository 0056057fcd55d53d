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


# Three fresh processes, each running one probe and then, as JAX stands after it, one device rule (the
# probe's scenario and the rule's need the same start: JAX not yet started, or already started):
# libtpu faked + XLA_FLAGS forcing 2 devices; nothing set (the probe never starts JAX); TGI_JAX_PLATFORM=cpu
# (its probe does not start JAX either; the script starts it with one device).
PREPARE = "from tgi.backends.tpu.backend import TpuBackend\nb = TpuBackend(platform='cpu', cache_dir='/tmp/tgi-tests-jax-cache')\n"
SCENARIOS = {
    "libtpu": (WITH_LIBTPU + PROBE + PREPARE + "b.prepare_devices(3)\n", {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}),
    "no runtime": (
        PROBE + "import sys; print(json.dumps('jax' in sys.modules))\n" + PREPARE + "b.prepare_devices(3)\n"
        "import jax\nprint(len(jax.devices('cpu')), b.describe_kernels('float32')['devices'])\n",
        {},
    ),
    "cpu": (PROBE + "import jax\njax.devices()\n" + PREPARE + "b.prepare_devices(3)\n", {"TGI_JAX_PLATFORM": "cpu"}),
}  # fmt: skip


@pytest.fixture(scope="module")
def ran():
    """`ran(scenario)`: the finished process of that scenario, run once for the module."""
    done: dict[str, subprocess.CompletedProcess] = {}

    def get(name: str) -> subprocess.CompletedProcess:
        if name not in done:
            code, env = SCENARIOS[name]
            done[name] = _run(code, **env)
        return done[name]

    return get


def _probed(out: subprocess.CompletedProcess, line: int = 0) -> list:
    return json.loads(out.stdout.strip().splitlines()[line])


def test_without_tpu_devices_the_probe_says_why_and_never_falls_back(ran) -> None:
    available, reason, priority, auto = _probed(ran("libtpu"))
    assert not available and "no JAX tpu devices" in reason and "TGI_JAX_PLATFORM=cpu" in reason
    assert priority == 20 and auto == "cpu"


def test_without_the_tpu_runtime_the_probe_says_so_without_importing_jax(ran) -> None:
    out = ran("no runtime")
    available, reason, priority, auto = _probed(out)
    assert not available and "libtpu" in reason and "TGI_JAX_PLATFORM=cpu" in reason
    assert priority == 20 and auto == "cpu"
    assert _probed(out, 1) is False  # a start-up on a machine without TPUs does not import JAX


def test_cpu_devices_only_when_asked_and_said(ran) -> None:
    available, reason, priority, auto = _probed(ran("cpu"))
    assert available and reason.endswith("on CPU devices (TGI_JAX_PLATFORM=cpu: not a TPU)")
    assert priority == -1 and auto == "cpu"  # auto never picks JAX-on-CPU over the torch CPU backend


def test_another_platform_is_refused(monkeypatch) -> None:
    from tgi.backends.tpu.platform import PlatformError, requested_platform

    monkeypatch.setenv("TGI_JAX_PLATFORM", "gpu")
    with pytest.raises(PlatformError, match="TGI_JAX_PLATFORM='gpu'"):
        requested_platform()


@pytest.mark.parametrize(
    ("scenario", "message"),
    [("libtpu", "XLA_FLAGS forces 2"), ("cpu", "JAX was started with 1")],  # JAX already started: 1 device
)
def test_too_few_cpu_devices_for_the_shards_is_refused(ran, scenario: str, message: str) -> None:
    out = ran(scenario)
    assert out.returncode != 0 and message in out.stderr and "--num-shard 3" in out.stderr


def test_shards_make_their_cpu_devices_before_jax_starts(ran) -> None:
    out = ran("no runtime")
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
