"""The backend owns its parallelism: the engine hands `--num-shard` to `Backend.create_runner`, which torch
backends answer with tensor-parallel processes and another backend may answer otherwise."""

from __future__ import annotations

import multiprocessing

import pytest

from tgi.backends.cpu.backend import CpuBackend
from tgi.core import __version__
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.interfaces.collective import SingleProcessCollective
from tgi.core.parallel import runner as tp_runner
from tgi.core.plugins import BackendRegistry, BackendSpec, hookimpl
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import write_tiny_llama
from tgi.core.torch.runner import TorchModelRunner


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


class OneProcessBackend(CpuBackend):
    """Takes any number of devices and runs them all in this process (as a JAX backend over a mesh would):
    no tensor-parallel processes."""

    name = "one-process"
    world_sizes: list[int] = []

    def create_runner(self, source, config, world_size=1):
        self.world_sizes.append(world_size)
        return self.create_rank_runner(source, config, SingleProcessCollective())


class _Plugin:
    @hookimpl
    def tgi_register_backends(self, register):
        register(
            BackendSpec(
                "one-process", __version__, INTERFACE_VERSION, 0, "test", ProbeResult.ok, OneProcessBackend
            )
        )


def test_the_engine_hands_num_shard_to_the_backend(tiny_llama):
    registry = BackendRegistry(plugins={"one-process": _Plugin()}, autoload=False)
    config = EngineConfig(model_id=str(tiny_llama), backend="one-process", dtype="float32", num_shard=4,
                          max_total_tokens=64, max_batch_total_tokens=256, max_batch_prefill_tokens=64)  # fmt: skip
    engine = LLMEngine.from_config(config, registry=registry)
    assert OneProcessBackend.world_sizes == [4]
    assert not multiprocessing.active_children()  # no rank was spawned: the backend chose so
    assert engine.backend.spec.name == "one-process"  # how a backend would build its peers
    [result] = engine.generate([[5, 6, 7]], SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert len(result.token_ids) == 3


def test_torch_backends_default_to_tensor_parallel_processes(tiny_llama, monkeypatch):
    backend = CpuBackend()
    config = EngineConfig(model_id=str(tiny_llama))
    from tgi.core.loading import resolve_model

    source = resolve_model(str(tiny_llama))
    single = backend.create_runner(source, config)
    assert type(single) is TorchModelRunner and single.collective.world_size == 1
    started = []
    monkeypatch.setattr(
        tp_runner.TensorParallelRunner, "start", classmethod(lambda cls, *args: started.append(args) or "tp")
    )
    assert backend.create_runner(source, config, 2) == "tp"
    assert started == [(backend, source, config, 2)]


def test_tensor_parallelism_needs_the_backend_spec(tiny_llama):
    from tgi.core.config import ConfigError
    from tgi.core.loading import resolve_model

    source = resolve_model(str(tiny_llama))  # 4 heads, 2 kv heads: splits over 2 ranks
    with pytest.raises(ConfigError, match="was not created from its BackendSpec"):
        CpuBackend().create_runner(source, EngineConfig(model_id=str(tiny_llama)), 2)
    assert not multiprocessing.active_children()
