"""`EngineConfig.deterministic` (`--deterministic`): refused with tensor parallelism, refused at start by a
backend without batch-invariant kernels and by a runner that does not declare itself batch-invariant (each
naming the flag and why), and on the CPU backend the start-up says the mode is on."""

from __future__ import annotations

import logging

import pytest

from tgi.backends.cpu.backend import CpuBackend
from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.interfaces import Backend, RunnerCapabilities
from tgi.core.testing.model import backend_registry, write_tiny_llama
from tgi.core.torch.runner import TorchModelRunner

LIMITS = dict(max_total_tokens=128, max_batch_total_tokens=1024, max_batch_prefill_tokens=64, max_num_seqs=4)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def start(tiny_llama, name: str, backend_class, **settings) -> LLMEngine:
    config = EngineConfig(
        model_id=str(tiny_llama), backend=name, dtype="float32", deterministic=True, **LIMITS, **settings
    )
    return LLMEngine.from_config(config, registry=backend_registry(name, backend_class))


def test_tensor_parallelism_is_refused_naming_the_all_reduce():
    with pytest.raises(ConfigError, match=r"--deterministic with --num-shard 2.*all-reduce"):
        EngineConfig(deterministic=True, num_shard=2)
    assert EngineConfig(deterministic=True).deterministic and not EngineConfig().deterministic


class NoInvariantKernels(CpuBackend):
    """A torch backend that keeps the contract's default: no batch-invariant kernels."""

    name = "no-invariant-kernels"

    def use_batch_invariant_kernels(self, dtype: str) -> None:
        Backend.use_batch_invariant_kernels(self, dtype)


class UndeclaredRunner(TorchModelRunner):
    def capabilities(self) -> RunnerCapabilities:
        return RunnerCapabilities()


class UndeclaringBackend(CpuBackend):
    """Switches its kernels, but its runner does not declare `batch_invariant`."""

    name = "undeclaring"

    def create_rank_runner(self, source, config, collective):
        return UndeclaredRunner(self, source, config, collective)


def test_a_backend_without_batch_invariant_kernels_is_refused_at_start(tiny_llama):
    with pytest.raises(
        ConfigError, match="--deterministic: backend 'no-invariant-kernels' has no batch-invariant"
    ):
        start(tiny_llama, NoInvariantKernels.name, NoInvariantKernels)


def test_a_runner_that_does_not_declare_it_is_refused(tiny_llama):
    with pytest.raises(
        ConfigError, match="--deterministic: the undeclaring backend's runner is not batch-invariant"
    ):
        start(tiny_llama, UndeclaringBackend.name, UndeclaringBackend)


def test_the_cpu_backend_runs_it_and_says_so(tiny_llama, caplog):
    with caplog.at_level(logging.INFO, logger="tgi.core.engine_startup"):  # the start-up's logger says it
        engine = start(tiny_llama, "cpu", CpuBackend)
    assert engine.runner.capabilities().batch_invariant
    assert "deterministic mode on" in caplog.text
    assert "--deterministic" in engine.backend.describe_kernels("float32")["prefill attention"]
    with pytest.raises(ConfigError, match=r"--deterministic: .*--attention cpu-native"):
        start(tiny_llama, "cpu", CpuBackend, attention="cpu-sdpa")
