"""The scheduler with prefix caching: only uncached tokens are fed and budgeted, a fully cached prompt still
samples, prompt logprobs are never skipped, preemption and cancellation keep the cache consistent, and
outputs equal those with the cache off (no torch).

The fake paged model (tests/fakes/fake_paged_model.py, given the block manager) predicts the next token from
every earlier token read back through the block table, so a cached block with the wrong contents changes
the outputs. It also refuses to write a slot of a block that is shared or cached.
"""

from __future__ import annotations

import random

import pytest
from fake_paged_model import FakePagedModel

from tgi.core.block_manager import BlockManager
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.request import FinishReason
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler
from tgi.core.sequence import Sequence

BS = 4


def drive(requests, caching: bool, num_blocks: int = 64, max_batch_tokens: int = 32, aborts=(), seqs=None):
    """requests: (arrival step, id, prompt, params). aborts: (step, id). Returns (outputs, scheduler,
    model, fed prompt tokens per request)."""
    bm = BlockManager(num_blocks, BS, prefix_caching=caching)
    sched = Scheduler(bm, 8, max_batch_tokens, RunnerConstraints())
    model = FakePagedModel(bm.num_blocks, BS, bm)
    outputs: dict[str, list[int]] = {}
    fed: dict[str, int] = {}
    pending = sorted(requests, key=lambda r: r[0])
    aborts = sorted(aborts)
    for step in range(5000):
        while pending and pending[0][0] <= step:
            _, rid, prompt, params = pending.pop(0)
            seq = Sequence(rid, prompt, params, seed=7)
            if seqs is not None:
                seqs[rid] = seq
            sched.add(seq)
        while aborts and aborts[0][0] <= step:
            sched.abort(aborts.pop(0)[1])
        if not pending and not sched.has_unfinished():
            break
        batch = sched.schedule()
        bm.check_invariants()
        assert batch.num_tokens <= max_batch_tokens
        held = [b for seq in sched.running for b in seq.block_table]
        assert all(bm.ref_count(b) == held.count(b) for b in set(held))
        assert bm.num_used_blocks == len(set(held))
        if batch.is_empty:
            continue
        for s in batch.sequences:
            fed[s.request_id] = fed.get(s.request_id, 0) + s.num_tokens
        for seq in sched.update(batch, model.execute(batch)):
            if seq.num_output_tokens >= seq.params.max_new_tokens:
                outputs[seq.request_id] = seq.output_token_ids
                sched.finish(seq.request_id, FinishReason.LENGTH)
    else:
        raise AssertionError("the workload did not finish")
    assert bm.num_free_blocks == num_blocks and bm.num_used_blocks == 0
    bm.check_invariants()
    return outputs, sched, model, fed


def _without(d: dict, ids: set[str]) -> dict:
    return {k: v for k, v in d.items() if k not in ids}


def greedy(n: int, **kw) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, **kw)


SYSTEM = list(range(500, 530))  # 30 tokens: 7 full blocks and 2 tokens


def test_a_later_request_feeds_only_its_uncached_tokens() -> None:
    reqs = [(0, "a", [*SYSTEM, 1, 2, 3], greedy(3)), (20, "b", [*SYSTEM, 7, 8], greedy(3))]
    seqs: dict[str, Sequence] = {}
    out_on, sched, _, fed = drive(reqs, caching=True, seqs=seqs)
    out_off, *_ = drive(reqs, caching=False)
    assert out_on == out_off
    assert seqs["b"].num_cached_prompt_tokens == 28  # 7 blocks of the system prompt
    assert fed["b"] == 32 - 28 + 2  # 4 prompt tokens, then 2 decodes
    assert sched.num_cache_hit_tokens == 28 and sched.num_cache_miss_tokens == 33 + 4


def test_a_repeated_prompt_is_fully_cached_but_still_samples() -> None:
    prompt = list(range(16))  # exactly four blocks
    reqs = [(0, "a", prompt, greedy(2)), (10, "b", prompt, greedy(2))]
    seqs: dict[str, Sequence] = {}
    out_on, _, _, fed = drive(reqs, caching=True, seqs=seqs)
    assert out_on["a"] == out_on["b"] == drive(reqs, caching=False)[0]["b"]
    assert seqs["b"].num_cached_prompt_tokens == 12 and fed["b"] == 4 + 1  # backs off one block


def test_the_budget_counts_only_uncached_tokens() -> None:
    long = list(range(200, 260))  # 60 tokens: 15 blocks
    reqs = [
        (0, "a", [*long, 1], greedy(1)),
        (30, "b", [*long, 2], greedy(1)),
        (30, "c", [*long, 3], greedy(1)),
    ]
    _, sched, _, fed = drive(reqs, caching=True, max_batch_tokens=16)
    # b and c each feed 1 token (their own last), both admitted in one 16-token step
    assert fed["b"] == fed["c"] == 1
    assert sched.num_cache_hit_tokens == 120


def test_a_runner_without_chunked_prefill_reads_no_cached_prefix() -> None:
    bm = BlockManager(32, BS, prefix_caching=True)
    sched = Scheduler(bm, 4, 64, RunnerConstraints(chunked_prefill=False))
    model = FakePagedModel(bm.num_blocks, BS, bm)
    for step, rid in enumerate(("a", "b")):
        sched.add(Sequence(rid, [*SYSTEM, step], greedy(1)))
        batch = sched.schedule()
        assert [(s.request_id, s.start_pos, s.num_tokens) for s in batch.sequences] == [(rid, 0, 31)]
        [seq] = sched.update(batch, model.execute(batch))
        sched.finish(seq.request_id, FinishReason.LENGTH)
    assert bm.num_cached_blocks == 7 and sched.num_cache_hit_tokens == 0


def test_prompt_logprobs_are_computed_not_read_from_the_cache() -> None:
    reqs = [
        (0, "a", [*SYSTEM, 1], greedy(2)),
        (20, "b", [*SYSTEM, 2], greedy(2, prompt_logprobs=True)),
    ]
    seqs: dict[str, Sequence] = {}
    _, _, model, fed = drive(reqs, caching=True, seqs=seqs)
    assert seqs["b"].num_cached_prompt_tokens == 0 and fed["b"] == 31 + 1
    assert model.prompt_logprob_positions["b"] == list(range(1, 31))  # every prompt token but the first


def test_preemption_and_cancellation_keep_outputs_and_cache_consistent() -> None:
    rng = random.Random(3)
    reqs = []
    for i in range(12):
        prompt = [*SYSTEM[: rng.choice((0, 12, 30))], *[rng.randrange(50) for _ in range(rng.randint(1, 14))]]
        reqs.append((rng.randrange(0, 20), f"r{i}", prompt, greedy(rng.randint(4, 14))))
    aborts = [(8, "r3"), (15, "r7")]
    out_on, sched_on, *_ = drive(reqs, caching=True, num_blocks=20, max_batch_tokens=24, aborts=aborts)
    out_off, *_ = drive(reqs, caching=False, num_blocks=20, max_batch_tokens=24, aborts=aborts)
    cancelled = {"r3", "r7"}  # may finish before their abort in one run and not in the other
    assert _without(out_on, cancelled) == _without(out_off, cancelled) and len(out_on) >= 10
    assert sched_on.num_preemptions > 0 and sched_on.num_cache_hit_tokens > 0


@pytest.mark.parametrize("seed", range(6))
def test_random_shared_prefix_workloads_match_the_cache_off(seed: int) -> None:
    rng = random.Random(seed)
    bases = [list(range(700, 700 + n)) for n in (0, 5, 17, 33)]
    reqs = []
    for i in range(30):
        prompt = [*rng.choice(bases), *[rng.randrange(50) for _ in range(rng.randint(1, 12))]]
        params = greedy(
            rng.randint(1, 12), priority=rng.choice((0, 0, 1)), prompt_logprobs=rng.random() < 0.2
        )
        reqs.append((rng.randrange(0, 60), f"r{i}", prompt, params))
    aborts = [(rng.randrange(0, 60), f"r{rng.randrange(30)}") for _ in range(4)]
    blocks = rng.choice((16, 20, 32))  # small: preemption and eviction
    on, sched, model_on, _ = drive(reqs, caching=True, num_blocks=blocks, aborts=aborts)
    off, _, model_off, _ = drive(reqs, caching=False, num_blocks=blocks, aborts=aborts)
    cancelled = {rid for _, rid in aborts}
    assert _without(on, cancelled) == _without(off, cancelled)
    positions_on, positions_off = model_on.prompt_logprob_positions, model_off.prompt_logprob_positions
    assert _without(positions_on, cancelled) == _without(positions_off, cancelled)
    assert sched.num_cache_hit_tokens > 0


def test_refcounts_when_a_sharing_sequence_is_preempted_readmitted_and_cancelled() -> None:
    bm = BlockManager(14, BS, prefix_caching=True)
    sched = Scheduler(bm, 4, 64, RunnerConstraints())
    model = FakePagedModel(bm.num_blocks, BS, bm)

    def step() -> None:
        batch = sched.schedule()
        sched.update(batch, model.execute(batch))
        bm.check_invariants()

    a = Sequence("a", [*SYSTEM[:24], 1], greedy(30), seed=7)
    sched.add(a)
    step()  # a computes 6 full blocks + 1 token; they enter the cache
    b = Sequence("b", [*SYSTEM[:24], 2], greedy(30, priority=-1), seed=7)
    sched.add(b)
    step()
    shared = a.block_table[:6]
    assert b.block_table[:6] == shared and all(bm.ref_count(x) == 2 for x in shared)
    while sched.num_preemptions == 0:  # both grow until the 14 blocks run out: b ranks lower
        step()
    assert b.num_computed_tokens == 0 and not b.block_table and sched.get("b") is b
    assert all(bm.ref_count(x) == 1 and bm.is_cached(x) for x in shared)  # a holds them alone now
    hits = sched.num_cache_hit_tokens
    sched.abort("a")  # a's blocks are freed, the cached ones kept for b
    assert all(bm.ref_count(x) == 0 and bm.is_cached(x) for x in shared)
    step()  # b comes back and reads its prefix, its own output blocks included
    # past the 25 prompt tokens: the blocks of b's own output, computed before its preemption, came back too
    assert b.block_table[:6] == shared and sched.num_cache_hit_tokens - hits >= 32
    assert bm.num_used_blocks == len(b.block_table)
    sched.abort("b")
    assert bm.num_used_blocks == 0 and bm.num_free_blocks == 14 and bm.num_cached_blocks > 6
    bm.check_invariants()
