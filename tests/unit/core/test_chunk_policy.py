"""The scheduler's chunking rules (src/tgi/core/chunk_policy.py), without a scheduler: chunk lengths within the budget
and the runner's buckets, padded prefill areas, prompt logprobs owed, recomputability, the cached prefix."""

from __future__ import annotations

import pytest

from tgi.core.block_manager import BlockManager
from tgi.core.chunk_policy import ChunkPolicy
from tgi.core.config import ConfigError
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.sampling_params import SamplingParams
from tgi.core.sequence import Sequence


def _seq(num_tokens: int, **params) -> Sequence:
    return Sequence("a", list(range(1, num_tokens + 1)), SamplingParams(**params))


def test_a_chunk_is_capped_by_the_budget_and_the_largest_prefill_bucket():
    policy = ChunkPolicy(BlockManager(64, 4), 32, RunnerConstraints(prefill_buckets=(8, 16)))
    assert policy.max_chunk_tokens == 16
    seq = _seq(40)
    assert policy.chunk_len(seq, 10) == 10
    assert policy.chunk_len(seq, 100) == 16
    assert policy.chunk_len(seq, 100, start=30) == 10  # the rest
    seq.num_computed_tokens = 36
    assert policy.chunk_len(seq, 100) == 4


def test_without_chunked_prefill_the_rest_comes_whole_or_waits():
    policy = ChunkPolicy(BlockManager(64, 4), 32, RunnerConstraints(chunked_prefill=False))
    assert policy.chunk_len(_seq(20), 32) == 20
    assert policy.chunk_len(_seq(20), 19) == 0
    assert policy.recomputable(_seq(32)) and not policy.recomputable(_seq(33))
    assert ChunkPolicy(BlockManager(64, 4), 32, RunnerConstraints()).recomputable(_seq(33))


def test_a_recomputation_stops_where_prompt_logprobs_are_still_owed():
    policy = ChunkPolicy(BlockManager(64, 4), 64, RunnerConstraints())
    seq = _seq(30, prompt_logprobs=True)
    assert seq.want_prompt_logprobs
    seq.prompt_logprobs_upto = 12  # positions 0-11 were reported before a preemption
    assert policy.chunk_len(seq, 64) == 12
    assert policy.chunk_len(seq, 64, start=12) == 18


def test_the_padded_prefill_area_caps_and_delays_chunks():
    c = RunnerConstraints(prefill_buckets=(4, 8), prefill_batch_buckets=(1, 2), max_padded_prefill_tokens=8)
    policy = ChunkPolicy(BlockManager(64, 4), 64, c)
    assert policy.max_chunk_tokens == 8  # the longest chunk that fits alone
    assert policy.prefill_budget(64, []) == 8
    assert policy.prefill_budget(64, [(_seq(4), 4)]) == 4  # two rows of at most 4
    assert policy.prefill_budget(64, [(_seq(8), 8)]) == 0  # a second row would not fit: it waits
    assert ChunkPolicy(BlockManager(64, 4), 64, RunnerConstraints()).prefill_budget(7, []) == 7
    with pytest.raises(ConfigError, match="smallest padded prefill step exceeds"):
        ChunkPolicy(
            BlockManager(64, 4), 64, RunnerConstraints(prefill_buckets=(8,), max_padded_prefill_tokens=4)
        )


def test_the_cached_prefix_leaves_the_last_token_and_the_owed_logprobs_to_compute():
    bm = BlockManager(64, 4, prefix_caching=True)
    policy = ChunkPolicy(bm, 64, RunnerConstraints())
    first = _seq(13)
    bm.allocate(first, 13)
    first.num_computed_tokens = 13
    bm.cache_computed(first)
    assert policy.cached_prefix(_seq(13)).num_tokens == 12  # three full blocks; the last token is fed
    owed = _seq(13, prompt_logprobs=True)
    owed.prompt_logprobs_upto = 5
    assert policy.cached_prefix(owed).num_tokens == 4
    no_chunks = ChunkPolicy(bm, 64, RunnerConstraints(chunked_prefill=False))
    assert no_chunks.cached_prefix(_seq(13)).num_tokens == 0
