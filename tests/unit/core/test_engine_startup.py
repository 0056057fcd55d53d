"""Engine start-up: the limits derived when the user leaves them unset (TGI's rules, and the KV budget from
memory, shared by the target's and the draft model's caches)."""

from __future__ import annotations

import dataclasses

import pytest

from tgi.backends.cpu.backend import CpuBackend
from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.engine_startup import DEFAULT_MAX_BATCH_PREFILL_TOKENS, derive_limits
from tgi.core.interfaces import KVCacheSpec, MemoryInfo, ModelInfo
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import write_tiny_llama
from tgi.core.torch import TorchBackend

INFO = ModelInfo("LlamaForCausalLM", 49152, 8192, (2,), "bfloat16", 135_000_000)
SPEC = KVCacheSpec(num_layers=30, num_kv_heads=3, head_dim=64, block_size=16, dtype="bfloat16")


class Runner:  # what derive_limits reads of a runner: the KV-cache shape, and no memory of its own
    def kv_cache_spec(self):
        return SPEC

    def memory_info(self):
        return None


class Memory:
    def __init__(self, free):
        self.free = free

    def memory_info(self):
        return MemoryInfo(total=self.free, free=self.free)


def test_defaults_follow_the_model_context():
    config = derive_limits(EngineConfig(max_batch_total_tokens=65536), INFO, Runner(), Memory(0))
    assert config.max_total_tokens == 8192 and config.max_input_tokens == 8191
    assert config.max_batch_prefill_tokens == min(8191 + 50, DEFAULT_MAX_BATCH_PREFILL_TOKENS)
    assert config.max_batch_total_tokens == 65536


def test_kv_budget_from_memory_takes_the_given_share():
    free = 8 * 2**30
    config = EngineConfig(kv_cache_memory_fraction=0.25)
    derived = derive_limits(config, INFO, Runner(), Memory(free))
    assert derived.max_batch_total_tokens == int(free * 0.25 // SPEC.bytes_per_block) * 16


def test_the_cpu_backend_keeps_most_host_memory_for_everything_else():
    # accelerators own their device memory (0.9 of it goes to the KV cache); host memory is shared
    assert TorchBackend.kv_cache_memory_fraction == 0.9
    assert CpuBackend.kv_cache_memory_fraction == 0.25
    assert EngineConfig().kv_cache_memory_fraction is None  # None: the backend's share


def test_a_cache_smaller_than_one_request_is_refused_with_the_reason():
    with pytest.raises(ConfigError, match="less than --max-total-tokens"):
        derive_limits(
            dataclasses.replace(EngineConfig(), kv_cache_memory_fraction=0.5), INFO, Runner(), Memory(2**20)
        )


def test_max_total_beyond_the_context_is_refused():
    with pytest.raises(ConfigError, match="exceeds the model's context length"):
        derive_limits(
            EngineConfig(max_total_tokens=9000, max_batch_total_tokens=16384), INFO, Runner(), Memory(0)
        )


def test_a_draft_model_shares_the_budget_by_the_sum_of_bytes_per_block():
    free = 8 * 2**30
    config = EngineConfig(kv_cache_memory_fraction=0.25)
    derived = derive_limits(config, INFO, Runner(), Memory(free), draft=Runner())
    assert derived.max_batch_total_tokens == int(free * 0.25 // (2 * SPEC.bytes_per_block)) * 16


def test_the_target_and_draft_caches_together_stay_within_the_budget(tmp_path, monkeypatch):
    """`--speculative-model` on the CPU with a free-memory figure of 8 MiB: the two KV caches made at
    start-up (one token count for both) hold no more than the budget's share of it."""
    model = write_tiny_llama(tmp_path / "tiny")
    free = 8 * 2**20
    monkeypatch.setattr(CpuBackend, "memory_info", lambda self: MemoryInfo(total=free, free=free))
    config = EngineConfig(
        model_id=str(model), backend="cpu", dtype="float32", kv_cache_memory_fraction=0.5, speculate=2,
        speculative_model=str(model), max_batch_prefill_tokens=32, max_num_seqs=4096,
    )  # fmt: skip
    engine = LLMEngine.from_config(config)
    try:
        target = engine.block_manager.num_blocks * engine.runner.kv_cache_spec().bytes_per_block
        draft = engine.proposer.blocks.num_blocks * engine.proposer.runner.kv_cache_spec().bytes_per_block
        assert engine.proposer.blocks.num_blocks == engine.block_manager.num_blocks
        budget = free * 0.5
        assert target + draft <= budget
        assert target + draft > budget - 2 * engine.runner.kv_cache_spec().bytes_per_block  # all of it
        [result] = engine.generate([[5, 17, 99, 4, 250, 8, 31]], SamplingParams(max_new_tokens=4))
        assert len(result.token_ids) == 4
    finally:
        engine.close()
