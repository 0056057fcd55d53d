"""Scheduler: continuous batching, chunked prefill, preemption, cancellation, constraints (no torch).

The model is the fake paged one of tests/fakes/fake_paged_model.py: it predicts each token from what it reads
back through the block table, so a wrong block table, a block shared by two live sequences, or a bad
recomputation changes the outputs, and comparing runs catches it.
"""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import dataclass, field

import pytest
from fake_paged_model import VOCAB, FakePagedModel

from tgi.core.block_manager import BlockManager
from tgi.core.config import ConfigError
from tgi.core.interfaces.batch import ScheduledBatch
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.request import FinishReason
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler, SchedulerError
from tgi.core.sequence import Sequence, SequenceStatus


@dataclass
class Run:
    outputs: dict[str, list[int]] = field(default_factory=dict)
    batches: list[ScheduledBatch] = field(default_factory=list)
    preemptions: int = 0
    model: FakePagedModel | None = None


def drive(
    requests: list[tuple[int, str, list[int], SamplingParams]],  # (arrival step, id, prompt, params)
    num_blocks: int = 64,
    block_size: int = 4,
    max_num_seqs: int = 8,
    max_batch_tokens: int = 32,
    constraints: RunnerConstraints | None = None,
    max_steps: int = 5000,
    model: FakePagedModel | None = None,
) -> Run:
    """The engine's step loop: schedule -> execute -> update -> stop checks -> finish, checking every
    budget at every step. `model`: another fake of the same cache size (default: `FakePagedModel`)."""
    c = constraints or RunnerConstraints()
    bm = BlockManager(num_blocks, block_size)
    sched = Scheduler(bm, max_num_seqs, max_batch_tokens, c)
    model = model or FakePagedModel(num_blocks, block_size)
    run = Run(model=model)
    pending = sorted(requests, key=lambda r: r[0])
    for step in range(max_steps):
        while pending and pending[0][0] <= step:
            _, rid, prompt, params = pending.pop(0)
            sched.add(Sequence(rid, prompt, params, seed=7))
        if not pending and not sched.has_unfinished():
            break
        batch = sched.schedule()
        check_batch(batch, sched, c, max_batch_tokens)
        run.batches.append(batch)
        if batch.is_empty:
            continue
        for seq in sched.update(batch, model.execute(batch)):
            if seq.num_output_tokens >= seq.params.max_new_tokens:
                run.outputs[seq.request_id] = seq.output_token_ids
                sched.finish(seq.request_id, FinishReason.LENGTH)
    else:
        raise AssertionError("the workload did not finish")
    assert bm.num_free_blocks == num_blocks and sched.num_running == sched.num_waiting == 0
    run.preemptions = sched.num_preemptions
    return run


def check_batch(batch: ScheduledBatch, sched: Scheduler, c: RunnerConstraints, max_tokens: int) -> None:
    bm = sched.block_manager
    bm.check_invariants()
    assert batch.num_tokens <= max_tokens
    if c.max_batch_tokens is not None:
        assert batch.num_tokens <= c.max_batch_tokens
    assert len(batch.sequences) <= sched.max_num_seqs
    if c.max_batch_size is not None:
        assert len(batch.sequences) <= c.max_batch_size
    if not c.mixed_batches:
        assert batch.num_prefill_seqs in (0, len(batch.sequences))
    prefills = [s for s in batch.sequences if s.is_prefill]
    if c.max_padded_prefill_tokens is not None and prefills:  # padded rows x padded longest chunk
        area = c.padded_prefill_tokens(len(prefills), max(s.num_tokens for s in prefills))
        assert area is not None and area <= c.max_padded_prefill_tokens, (area, prefills)
    assert all(s.is_prefill for s in batch.sequences[: batch.num_prefill_seqs])
    assert not any(s.is_prefill for s in batch.sequences[batch.num_prefill_seqs :])
    assert len({s.request_id for s in batch.sequences}) == len(batch.sequences)
    for s in batch.sequences:
        if not s.is_prefill:
            assert s.num_tokens == 1 and s.sample
        elif c.prefill_buckets:
            assert s.num_tokens <= max(c.prefill_buckets)
        if not c.chunked_prefill and s.is_prefill:
            assert s.start_pos == 0 and s.sample  # whole context in one prefill
    tables = [b for seq in sched.running for b in seq.block_table]
    assert len(tables) == len(set(tables)) == bm.num_used_blocks  # exact, no block held twice
    assert sched.num_waiting + sched.num_running == len(sched._seqs)


def greedy(n: int, **kw) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, **kw)


def random_workload(rng: random.Random, n: int, max_prompt: int = 40, max_new: int = 12):
    return [
        (rng.randrange(0, 30), f"r{i}", [rng.randrange(VOCAB) for _ in range(rng.randint(1, max_prompt))],
         greedy(rng.randint(1, max_new), priority=rng.choice((0, 0, 1)), prompt_logprobs=rng.random() < 0.3))
        for i in range(n)
    ]  # fmt: skip


def test_scheduler_imports_no_torch() -> None:
    code = "import sys, tgi.core.scheduler, tgi.core.block_manager, tgi.core.sequence; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_join_and_leave_mid_batch() -> None:
    reqs = [(0, "a", [1, 2, 3], greedy(6)), (2, "b", [4, 5], greedy(2)), (3, "c", [6] * 5, greedy(4))]
    run = drive(reqs)
    assert {k: len(v) for k, v in run.outputs.items()} == {"a": 6, "b": 2, "c": 4}
    steps = [{s.request_id for s in b.sequences} for b in run.batches]
    assert steps[0] == {"a"} and steps[2] == {"a", "b"} and steps[3] == {"a", "b", "c"}
    assert steps[4] == {"a", "c"}  # b left after its 2nd token, a and c go on
    freed = [rid for b in run.batches for rid in b.freed_request_ids]
    assert freed[:1] == ["b"]
    # each alone gives the same tokens: batching does not change results
    for rid, start, prompt, params in reqs:
        assert drive([(0, start, prompt, params)]).outputs[start] == run.outputs[start], rid


def test_chunked_prefill_keeps_decodes_running() -> None:
    reqs = [(0, "short", [1, 2], greedy(12)), (2, "long", list(range(100)), greedy(2))]
    run = drive(reqs, max_batch_tokens=16, block_size=4, num_blocks=64)
    long_chunks = [s for b in run.batches for s in b.sequences if s.request_id == "long" and s.is_prefill]
    assert len(long_chunks) >= 7 and sum(s.num_tokens for s in long_chunks) == 100
    assert [s.sample for s in long_chunks] == [False] * (len(long_chunks) - 1) + [True]
    for b in run.batches[1:10]:  # short decodes every step while long prefills in chunks
        assert "short" in {s.request_id for s in b.sequences if not s.is_prefill}
    assert drive([reqs[1]]).outputs["long"] == run.outputs["long"]


def test_preemption_gives_identical_outputs() -> None:
    reqs = [(i, f"r{i}", [i + 1] * (5 + 3 * i), greedy(20)) for i in range(5)]
    big = drive(reqs, num_blocks=200)
    small = drive(reqs, num_blocks=12, block_size=4)
    assert big.preemptions == 0 and small.preemptions > 0
    assert small.outputs == big.outputs


@pytest.mark.parametrize("seed", range(12))
def test_random_workloads_respect_budgets_and_match(seed: int) -> None:
    rng = random.Random(seed)
    reqs = random_workload(rng, rng.randint(5, 14))
    c = RunnerConstraints(
        max_batch_size=rng.choice((None, 3)),
        prefill_buckets=rng.choice((None, (4, 8, 16))),
        mixed_batches=rng.random() < 0.7,
        max_batch_tokens=rng.choice((None, 6, 12)),
        # drawn apart, so that the draws above (and the workload) stay those of the seed
        **padded_prefill(random.Random(seed + 1000)),
    )
    reference = drive(reqs, num_blocks=400, max_num_seqs=16, max_batch_tokens=64)
    tight = drive(reqs, num_blocks=14, block_size=4, max_num_seqs=6, max_batch_tokens=rng.randint(8, 24),
                  constraints=c)  # fmt: skip
    assert tight.outputs == reference.outputs
    for _, rid, prompt, params in reqs:
        if params.prompt_logprobs:  # exactly once per prompt token but the first, preemptions or not
            assert sorted(tight.model.prompt_logprob_positions[rid]) == list(range(1, len(prompt)))


def padded_prefill(rng: random.Random) -> dict:
    """A random padded-prefill bound (prefill rows padded to 2, 4 or 6, or not at all), or none."""
    if rng.random() < 0.3:
        return {}
    return dict(
        prefill_batch_buckets=rng.choice((None, (2, 4, 6))), max_padded_prefill_tokens=rng.choice((8, 16, 24))
    )


def test_padded_prefill_area_is_bounded_and_a_lone_prompt_progresses() -> None:
    c = RunnerConstraints(
        prefill_buckets=(4, 8, 16),
        prefill_batch_buckets=(2, 4),
        max_padded_prefill_tokens=16,
        mixed_batches=False,
    )
    assert c.prefill_room(0, 0) == 8 and c.prefill_room(1, 8) == 8 and c.prefill_room(2, 3) == 4
    assert c.prefill_room(2, 5) == 0 and c.prefill_room(4, 1) == 0  # 4 x 8 > 16; no bucket for 5 rows
    reqs = [
        (0, "long", list(range(40)), greedy(3)),
        (0, "b", [5] * 6, greedy(3)),
        (0, "c", [6] * 3, greedy(3)),
    ]
    run = drive(reqs, max_batch_tokens=32, constraints=c)
    first = {s.request_id: s.num_tokens for s in run.batches[0].sequences}
    # 2 rows pad to 2 x 8: "long" is cut to 8 tokens (16 fit the real budget), "c" waits (4 rows x 8 > 16)
    assert first == {"long": 8, "b": 6}
    long_chunks = [
        s.num_tokens for b in run.batches for s in b.sequences if s.request_id == "long" and s.is_prefill
    ]
    assert max(long_chunks) == 8 and sum(long_chunks) == 40
    assert run.outputs == drive(reqs).outputs
    # a single chunk that cannot fit alone: refused at construction, never a silent stall
    with pytest.raises(ConfigError, match="smallest padded prefill step exceeds max_padded_prefill_tokens 7"):
        Scheduler(BlockManager(64, 4), 8, 32, RunnerConstraints(prefill_buckets=(4, 8), prefill_batch_buckets=(2,),
                                                                max_padded_prefill_tokens=7))  # fmt: skip
    # without chunked prefill, a prompt longer than the longest chunk that fits alone is refused at add
    sched = Scheduler(BlockManager(64, 4), 8, 32, RunnerConstraints(chunked_prefill=False, **{
        k: getattr(c, k) for k in ("prefill_buckets", "prefill_batch_buckets", "max_padded_prefill_tokens")}))  # fmt: skip
    with pytest.raises(ValueError, match=r"largest prefill \(8 tokens"):
        sched.add(Sequence("nine", [1] * 9, greedy(1)))


def test_preempted_mid_prompt_reports_prompt_logprobs_once() -> None:
    reqs = [(0, "a", [3] * 6, greedy(30)), (1, "b", list(range(40)), greedy(3, prompt_logprobs=True))]
    run = drive(reqs, num_blocks=12, block_size=4, max_batch_tokens=8)
    assert run.preemptions > 0
    assert sorted(run.model.prompt_logprob_positions["b"]) == list(range(1, 40))
    assert run.outputs == drive(reqs, num_blocks=100).outputs


def test_cancellation_returns_every_block() -> None:
    bm = BlockManager(16, 4)
    sched = Scheduler(bm, max_num_seqs=4, max_batch_tokens=8)
    model = FakePagedModel(16, 4)
    for rid, n in (("run", 3), ("chunked", 20), ("queued", 5)):
        sched.add(Sequence(rid, list(range(n)), greedy(5)))
    batch = sched.schedule()
    sched.update(batch, model.execute(batch))
    assert (
        sched.get("chunked").num_computed_tokens == 5 and sched.get("queued").status is SequenceStatus.WAITING
    )
    assert bm.num_used_blocks > 0
    assert sched.abort("chunked") and sched.abort("queued") and sched.abort("run")
    assert not sched.abort("run") and not sched.abort("never-seen")  # idempotent
    assert bm.num_free_blocks == 16 and not sched.has_unfinished()
    sched.add(Sequence("next", [1], greedy(1)))
    assert sched.schedule().freed_request_ids == ["chunked", "queued", "run"]


def test_abort_between_schedule_and_update_is_ignored() -> None:
    bm = BlockManager(8, 4)
    sched = Scheduler(bm, 4, 16)
    sched.add(Sequence("a", [1, 2], greedy(3)))
    sched.add(Sequence("b", [3], greedy(3)))
    batch = sched.schedule()
    out = FakePagedModel(8, 4).execute(batch)
    sched.abort("a")
    assert [s.request_id for s in sched.update(batch, out)] == ["b"]


def test_priority_then_fifo_admission() -> None:
    sched = Scheduler(BlockManager(64, 4), max_num_seqs=1, max_batch_tokens=64)
    for rid, prio in (("low1", 0), ("high1", 2), ("low2", 0), ("mid", 1), ("high2", 2)):
        sched.add(Sequence(rid, [1, 2], greedy(1, priority=prio)))
    order = []
    while sched.has_unfinished():
        batch = sched.schedule()
        order.append(batch.sequences[0].request_id)
        sched.finish(order[-1], FinishReason.LENGTH)
    assert order == ["high1", "high2", "mid", "low1", "low2"]


def test_preemption_picks_lowest_priority_and_requeues_it_first() -> None:
    bm = BlockManager(4, 2)
    sched = Scheduler(bm, 8, 64)
    model = FakePagedModel(4, 2)
    sched.add(Sequence("vip", [1, 2, 3], greedy(4, priority=1)))
    sched.add(Sequence("low", [4, 5, 6], greedy(4)))
    sched.add(Sequence("later", [7], greedy(4)))
    for _ in range(3):  # prefill both, decode both, then vip needs a third block
        batch = sched.schedule()
        sched.update(batch, model.execute(batch))
    assert sched.get("low").num_preemptions == 1 and sched.get("vip").num_preemptions == 0
    assert [s.request_id for s in sched.waiting] == ["low", "later"]  # ahead of a later arrival


def test_max_batch_size_and_non_mixed_batches() -> None:
    reqs = [(i, f"r{i}", [i] * 9, greedy(5)) for i in range(6)]
    c = RunnerConstraints(max_batch_size=2, mixed_batches=False)
    run = drive(reqs, constraints=c)  # check_batch asserts both constraints at every step
    assert max(len(b.sequences) for b in run.batches) == 2
    assert run.outputs == drive(reqs).outputs


def test_without_chunked_prefill_a_prompt_waits_for_room() -> None:
    c = RunnerConstraints(chunked_prefill=False, prefill_buckets=(8, 16))
    reqs = [(0, "a", [1] * 3, greedy(4)), (0, "b", [2] * 16, greedy(2)), (1, "c", [3] * 10, greedy(2))]
    run = drive(reqs, max_batch_tokens=20, constraints=c)
    first = {s.request_id: s for s in run.batches[0].sequences}
    assert set(first) == {"a", "b"} and first["b"].num_tokens == 16  # whole, never chunked
    c_prefill = next(s for b in run.batches for s in b.sequences if s.request_id == "c")
    assert c_prefill.num_tokens == 10
    assert run.outputs == drive(reqs).outputs
    sched = Scheduler(BlockManager(64, 4), 8, 20, c)
    with pytest.raises(ValueError, match="largest prefill"):
        sched.add(Sequence("huge", [1] * 17, greedy(1)))


def test_add_rejects_requests_larger_than_the_cache() -> None:
    sched = Scheduler(BlockManager(4, 4), 8, 64)
    sched.add(Sequence("fits", [1] * 10, greedy(7)))  # 16 tokens ever cached: exactly 4 blocks
    with pytest.raises(ValueError, match="KV blocks"):
        sched.add(Sequence("too-big", [1] * 10, greedy(8)))
    with pytest.raises(ValueError, match="already"):
        sched.add(Sequence("fits", [1], greedy(1)))


def test_counters() -> None:
    bm = BlockManager(16, 4)
    sched = Scheduler(bm, 1, 64)
    sched.add(Sequence("a", [1] * 6, greedy(3)))
    sched.add(Sequence("b", [1] * 6, greedy(3)))
    batch = sched.schedule()
    sched.update(batch, FakePagedModel(16, 4).execute(batch))
    assert (sched.num_running, sched.num_waiting, sched.num_used_blocks, sched.num_cached_tokens) == (
        1,
        1,
        2,
        6,
    )


def test_a_sequence_outgrowing_the_whole_cache_raises() -> None:
    """Only reachable when the engine fails to stop a request at its limit (add() refuses larger ones)."""
    sched = Scheduler(BlockManager(2, 2), 4, 8)
    model = FakePagedModel(2, 2)
    sched.add(Sequence("a", [1, 2], greedy(3)))  # at most 4 tokens cached: 2 blocks
    with pytest.raises(SchedulerError, match="exceeds the cache"):
        for _ in range(5):  # never finished: the 5th cached token needs a 3rd block
            batch = sched.schedule()
            sched.update(batch, model.execute(batch))
