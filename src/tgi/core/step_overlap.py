"""Overlapped steps (vLLM's async scheduling): step N+1 is scheduled and started on the device before the
host settles step N (its tokens read back, detokenized, stop-checked, streamed), so that the device does not
idle while the host does that work.

The scheduler takes step N as run before its tokens are known (`Scheduler.advance`): each sampled sequence
gets `PENDING_TOKEN` as its next token, and the runner feeds step N+1 the token it sampled for it, on the
device. A sequence that turns out to stop at step N has run one step too many: that step's token is dropped
(the scheduler skips a finished sequence) and its blocks are freed a step late, which the device's order of
work makes safe (step N+1 runs before anything scheduled later writes them).

Only a step whose next one needs none of its tokens on the host is overlapped: no grammar masks (the next
mask follows the token), no penalty, DRY, bad words, logits processor or watermark (they read the token
history), no guesses to verify (the engine overlaps nothing when it speculates), no request that predicts
its output (its next guesses follow the token: `Drafts.follows_tokens`). Any other step is waited for before
the next is scheduled.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tgi.core.interfaces.batch import ScheduledBatch
from tgi.core.interfaces.runner import StepHandle
from tgi.core.request import TokenEvent
from tgi.core.sampling_params import SamplingParams

if TYPE_CHECKING:
    from tgi.core.engine import LLMEngine


def reads_token_history(params: SamplingParams) -> bool:
    """Whether sampling a request's next token reads the tokens before it (so the last one must be known)."""
    return (
        params.repetition_penalty != 1.0
        or params.frequency_penalty != 0.0
        or params.presence_penalty != 0.0
        or params.watermark is not None
        or params.grammar is not None
        or params.dry_multiplier != 0.0
        or bool(params.bad_words_ids)
        or bool(params.logits_processors)
    )


def overlappable(batch: ScheduledBatch) -> bool:
    """Whether the step after `batch` may be scheduled before `batch`'s tokens are on the host."""
    if batch.token_masks is not None:
        return False
    return not any(s.num_draft_tokens or reads_token_history(s.sampling) for s in batch.sequences if s.sample)


@dataclass
class InFlightStep:
    """A started step not yet settled."""

    batch: ScheduledBatch
    handle: StepHandle


class StepOverlap:
    """The engine's overlapped steps: at most one started and not settled (`in_flight`). It holds its engine
    weakly, as `ServedAdapters` does: the engine owns it, and a cycle between them would keep a swapped-out
    model alive once the server has frozen its start-up objects (`gc.freeze`)."""

    def __init__(self, engine: LLMEngine, overlapping: bool) -> None:
        self.engine = weakref.proxy(engine)
        self.overlapping = overlapping  # --async-scheduling, and a runner with `async_steps`
        self.in_flight: InFlightStep | None = None
        self.num_overlapped = 0  # steps left in flight while the next was scheduled, since start

    def run_overlapped(self, batch: ScheduledBatch) -> list[TokenEvent]:
        """Start `batch`, then settle the step before (its events are returned); `batch` stays in flight when
        `overlappable`, else it is waited for and settled too."""
        engine = self.engine
        engine.prepare_step(batch)
        started = time.perf_counter()
        handle = engine.runner.execute_async(batch)
        engine.step_seconds += time.perf_counter() - started
        events = self.settle_in_flight()
        if overlappable(batch) and not engine.drafts.follows_tokens(batch):
            engine.scheduler.advance(batch)
            self.in_flight = InFlightStep(batch, handle)
            self.num_overlapped += 1
            return events
        output = self._wait(handle)
        return events + engine.emit(batch, output, engine.scheduler.update(batch, output))

    def settle_in_flight(self) -> list[TokenEvent]:
        """Wait for the step in flight, if any, and turn its tokens into events."""
        step = self.in_flight
        if step is None:
            return []
        output = self._wait(step.handle)  # a failure leaves it in flight: `drop_in_flight` names its requests
        self.in_flight = None
        return self.engine.emit(step.batch, output, self.engine.scheduler.settle(step.batch, output))

    def drop_in_flight(self) -> list[str]:
        """Forget the step in flight (a step failed, or every request is aborted): waits for it, ignoring
        its failure; returns its requests' ids."""
        step, self.in_flight = self.in_flight, None
        if step is None:
            return []
        with contextlib.suppress(Exception):  # its requests are failed or aborted by the caller
            step.handle.result()
        return [s.request_id for s in step.batch.sequences]

    def _wait(self, handle: StepHandle):
        started = time.perf_counter()
        output = handle.result()
        self.engine.step_seconds += time.perf_counter() - started
        return output
