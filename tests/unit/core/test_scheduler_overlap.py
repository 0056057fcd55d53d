"""The scheduler's overlapped steps (`Scheduler.advance` / `settle`, no torch): step N+1 is scheduled before
step N's tokens are known, and the outputs equal those of steps run one after another, under chunked
prefill, preemption, prefix caching and early stops.

The model is the fake paged one of tests/fakes/fake_paged_model.py (a wrong block table, a shared block or a
bad recomputation changes its outputs); here it is fed as a runner with `async_steps` is: a decode's token
`PENDING_TOKEN` is taken from what it sampled for that request in its step before.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from fake_paged_model import VOCAB, FakePagedModel

from tgi.core.block_manager import BlockManager
from tgi.core.interfaces.batch import PENDING_TOKEN, ScheduledBatch, StepOutput
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.request import FinishReason
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler, SchedulerError
from tgi.core.sequence import Sequence, SequenceStatus

STOP_TOKEN = 7  # a request with `stop_token_ids=(7,)` ends at it (checked by the driver, as the engine would)


class DeviceFedModel:
    """The fake paged model behind a runner that keeps its last sampled tokens: PENDING_TOKEN is replaced
    with them before the model sees the batch (and its history), as the torch runner does on the device."""

    def __init__(self, model: FakePagedModel) -> None:
        self.model = model
        self.last: dict[str, int] = {}
        self.fed_pending = 0

    def execute(self, batch: ScheduledBatch) -> StepOutput:
        seqs = []
        for s in batch.sequences:
            if s.token_ids[-1:] == [PENDING_TOKEN]:
                token = self.last[s.request_id]  # KeyError: the step before sampled none for it
                self.fed_pending += 1
                history = list(s.all_token_ids)
                assert history[-1] == PENDING_TOKEN and PENDING_TOKEN not in history[:-1]
                s = dataclasses.replace(
                    s, token_ids=[*s.token_ids[:-1], token], all_token_ids=[*history[:-1], token]
                )
            else:
                assert PENDING_TOKEN not in s.all_token_ids, f"{s.request_id}: history with a pending token"
            seqs.append(s)
        out = self.model.execute(dataclasses.replace(batch, sequences=seqs))
        self.last = dict(zip(out.request_ids, out.token_ids, strict=True))
        return out


def ends(seq: Sequence) -> FinishReason | None:
    if seq.output_token_ids[-1:] == [STOP_TOKEN] and STOP_TOKEN in seq.params.stop_token_ids:
        return FinishReason.STOP
    if seq.num_output_tokens >= seq.params.max_new_tokens:
        return FinishReason.LENGTH
    return None


def drive(requests, overlapped: bool, num_blocks=64, block_size=4, max_batch_tokens=32, caching=False):
    """The engine's loop, waited or overlapped; returns (outputs by request, preemptions, fed pending)."""
    bm = BlockManager(num_blocks, block_size, prefix_caching=caching)
    sched = Scheduler(bm, 8, max_batch_tokens, RunnerConstraints())
    model = DeviceFedModel(FakePagedModel(num_blocks, block_size, bm if caching else None))
    outputs: dict[str, list[int]] = {}
    waiting = sorted(requests, key=lambda r: r[0])
    in_flight: tuple[ScheduledBatch, StepOutput] | None = None

    def finish_ended(seqs):
        for seq in seqs:
            reason = ends(seq)
            if reason is not None:
                outputs[seq.request_id] = seq.output_token_ids
                sched.finish(seq.request_id, reason)

    for step in range(5000):
        while waiting and waiting[0][0] <= step:
            _, rid, prompt, params = waiting.pop(0)
            sched.add(Sequence(rid, prompt, params, seed=7))
        if not waiting and not sched.has_unfinished() and in_flight is None:
            break
        batch = sched.schedule()
        bm.check_invariants()
        out = None if batch.is_empty else model.execute(batch)
        if overlapped:
            if in_flight is not None:
                finish_ended(sched.settle(*in_flight))
                in_flight = None
            if out is not None:
                sched.advance(batch)
                in_flight = (batch, out)
        elif out is not None:
            finish_ended(sched.update(batch, out))
    else:
        raise AssertionError("the workload did not finish")
    assert bm.num_free_blocks == num_blocks and sched.num_running == sched.num_waiting == 0
    return outputs, sched.num_preemptions, model.fed_pending


def workload(seed: int, n: int = 10):
    rng = random.Random(seed)
    return [
        (rng.randrange(0, 20), f"r{i}", [rng.randrange(VOCAB) for _ in range(rng.randint(1, 30))],
         SamplingParams(max_new_tokens=rng.randint(1, 14), priority=rng.choice((0, 0, 1)),
                        stop_token_ids=(STOP_TOKEN,) if rng.random() < 0.5 else ()))
        for i in range(n)
    ]  # fmt: skip


@pytest.mark.parametrize("seed", range(8))
def test_overlapped_steps_give_the_outputs_of_waited_ones(seed):
    reqs = workload(seed)
    waited, _, _ = drive(reqs, overlapped=False)
    overlapped, _, fed = drive(reqs, overlapped=True)
    assert overlapped == waited and fed > 0


def test_under_preemption_and_with_the_prefix_cache(seed=3):
    shared = list(range(100, 120))
    reqs = [(i, f"s{i}", shared + [i] * (3 + i), SamplingParams(max_new_tokens=20)) for i in range(6)]
    reqs += workload(seed, 6)
    waited, _, _ = drive(reqs, overlapped=False, num_blocks=200, caching=True)
    small, preemptions, fed = drive(reqs, overlapped=True, num_blocks=24, caching=True)
    assert small == waited and preemptions > 0 and fed > 0


def test_a_request_that_reached_max_new_tokens_is_not_scheduled_again():
    bm = BlockManager(16, 4)
    sched = Scheduler(bm, 8, 32, RunnerConstraints())
    sched.add(Sequence("a", [1, 2, 3], SamplingParams(max_new_tokens=1), seed=0))
    first = sched.schedule()
    sched.advance(first)
    seq = sched.get("a")
    assert seq.token_ids == [1, 2, 3, PENDING_TOKEN] and seq.is_decode
    assert sched.schedule().is_empty  # its one token is on the device: nothing left to run for it
    [settled] = sched.settle(first, StepOutput(["a"], [42], [-0.1]))
    assert settled is seq and seq.token_ids == [1, 2, 3, 42] and seq.new_token_rows == range(0, 1)


def test_a_sequence_preempted_while_its_token_is_pending_gets_it_and_recomputes_with_it():
    bm = BlockManager(3, 4)  # 12 slots: two sequences of 5 and 4 tokens fill them at the first decodes
    sched = Scheduler(bm, 8, 32, RunnerConstraints())
    sched.add(Sequence("hi", [1, 2, 3, 4], SamplingParams(max_new_tokens=9, priority=1), seed=0))
    sched.add(Sequence("lo", [5, 6, 7, 8], SamplingParams(max_new_tokens=9), seed=0))
    prefill = sched.schedule()
    sched.advance(prefill)
    decode = sched.schedule()  # both decodes need a second block: "lo" is preempted, its token pending
    lo = sched.get("lo")
    assert [s.request_id for s in decode.sequences] == ["hi"] and lo.status is SequenceStatus.WAITING
    settled = sched.settle(prefill, StepOutput(["hi", "lo"], [10, 11], [0.0, 0.0]))
    assert [s.request_id for s in settled] == ["hi", "lo"] and lo.token_ids == [5, 6, 7, 8, 11]
    with pytest.raises(SchedulerError, match="settled twice"):
        sched.settle(prefill, StepOutput(["hi", "lo"], [10, 11], [0.0, 0.0]))
