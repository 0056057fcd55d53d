"""The torch runner's warm-up: one prefill and one decode step, bounded by the backend's
`warmup_prefill_tokens` and `warmup_decode_seqs` where its memory is not profiled by them (the CPU: a
warm-up of the whole step budget and of `--max-num-seqs` decodes only cost start-up time), else the whole
step budget and `--max-num-seqs`."""

from __future__ import annotations

import pytest

from tgi.backends.cpu.backend import CpuBackend
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.testing.model import backend_registry, write_tiny_llama
from tgi.core.torch.runner import TorchModelRunner

LIMITS = dict(
    max_total_tokens=256, max_batch_total_tokens=8192, max_batch_prefill_tokens=200, max_num_seqs=40
)


class UnboundedWarmup(CpuBackend):
    """The CPU backend with the contract's default warm-up: the whole budget."""

    name = "unbounded-warmup"
    warmup_prefill_tokens = None
    warmup_decode_seqs = None


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def warmup_steps(monkeypatch, tiny_llama, backend_class) -> list[tuple[int, int]]:
    """(prompt tokens, decodes) of each step the warm-up ran."""
    steps = []
    execute_async = TorchModelRunner.execute_async

    def recording(self, batch):
        prefill = sum(len(s.token_ids) for s in batch.sequences if s.is_prefill)
        steps.append((prefill, sum(1 for s in batch.sequences if not s.is_prefill)))
        return execute_async(self, batch)

    monkeypatch.setattr(TorchModelRunner, "execute_async", recording)
    config = EngineConfig(model_id=str(tiny_llama), backend=backend_class.name, dtype="float32", **LIMITS)
    LLMEngine.from_config(config, registry=backend_registry(backend_class.name, backend_class))
    return steps


def test_the_cpu_backend_warms_up_on_a_short_prefill_and_few_decodes(monkeypatch, tiny_llama):
    assert warmup_steps(monkeypatch, tiny_llama, CpuBackend) == [(80, 0), (0, 16)]


def test_the_default_warms_up_on_the_step_budget_and_max_num_seqs(monkeypatch, tiny_llama):
    assert warmup_steps(monkeypatch, tiny_llama, UnboundedWarmup) == [(200, 0), (0, 40)]
