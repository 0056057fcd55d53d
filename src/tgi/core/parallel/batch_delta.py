"""A step of a tensor-parallel group as what changed since the last step, not as a whole-batch snapshot.

Rank 0 (`DeltaEncoder`) keeps what it has told the other ranks about each live sequence (its token history,
block table, sampling parameters); each step it sends only the difference: a sequence's whole history and
parameters the first time (or again after it was freed: preempted and recomputed), afterwards the tokens
appended to its history, the blocks appended to its table, and the step's slice of it (start position,
how many tokens). The other ranks (`BatchMirror`) keep the same state and rebuild the `ScheduledBatch` rank 0
executes, equal field by field. The bytes of a decode step grow with the number of sequences, not with their
context. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence
from tgi.core.sampling_params import SamplingParams


class DeltaMismatch(RuntimeError):
    """A delta names a sequence this rank does not hold, or keeps more than it holds: the ranks are out of
    step (a bug; the group cannot go on)."""


@dataclass(frozen=True)
class SequenceDelta:
    """One scheduled sequence of a step, relative to what the receiving rank already holds of it.

    History: keep the first `history_keep` tokens held, then append `history_append`. Block table: keep the
    first `blocks_keep`, append `blocks_append`. `sampling`, `seed` and `num_prompt_tokens` are set for a
    sequence the receiver does not hold yet (or when they changed), None otherwise. The tokens fed this step
    are `history[start_pos : start_pos + num_from_history] + extra_token_ids` (the extra ones: speculative
    guesses, which are not in the history)."""

    request_id: str
    start_pos: int
    num_from_history: int
    extra_token_ids: tuple[int, ...]
    is_prefill: bool
    sample: bool
    want_prompt_logprobs: bool
    num_draft_tokens: int
    history_keep: int
    history_append: tuple[int, ...]
    blocks_keep: int
    blocks_append: tuple[int, ...]
    sampling: SamplingParams | None = None
    seed: int | None = None
    num_prompt_tokens: int | None = None


@dataclass(frozen=True)
class StepDelta:
    """One `ScheduledBatch` as deltas: `freed_request_ids` are dropped first, then `sequences` applied in
    batch order. `token_masks` travel as they are (their size is per sampled row, not per token of context)."""

    step: int
    num_prefill_seqs: int
    freed_request_ids: tuple[str, ...]
    sequences: tuple[SequenceDelta, ...]
    token_masks: Any = None  # TokenMasks | None


@dataclass
class _Held:
    """What both sides hold of one sequence."""

    history: list[int]
    blocks: list[int]
    sampling: SamplingParams
    seed: int
    num_prompt_tokens: int


def _common_prefix(held: list[int], current: Any) -> int:
    """How many leading items `held` shares with `current` (all of `held` in the usual append-only case)."""
    n = len(held)
    if len(current) >= n and list(current[:n]) == held:
        return n
    k = 0
    for a, b in zip(held, current, strict=False):
        if a != b:
            break
        k += 1
    return k


class DeltaEncoder:
    """Rank 0's side: `encode(batch)` gives the `StepDelta` to broadcast and remembers what it sent."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    @property
    def num_held(self) -> int:
        return len(self._held)

    def encode(self, batch: ScheduledBatch) -> StepDelta:
        for request_id in batch.freed_request_ids:
            self._held.pop(request_id, None)
        return StepDelta(
            step=batch.step,
            num_prefill_seqs=batch.num_prefill_seqs,
            freed_request_ids=tuple(batch.freed_request_ids),
            sequences=tuple(self._encode(s) for s in batch.sequences),
            token_masks=batch.token_masks,
        )

    def _encode(self, s: ScheduledSequence) -> SequenceDelta:
        held = self._held.get(s.request_id)
        changed = (
            held is None
            or held.seed != s.seed
            or held.num_prompt_tokens != s.num_prompt_tokens
            or (held.sampling is not s.sampling and held.sampling != s.sampling)
        )
        if held is None:
            held = _Held([], [], s.sampling, s.seed, s.num_prompt_tokens)
            self._held[s.request_id] = held
        history_keep = _common_prefix(held.history, s.all_token_ids)
        history_append = tuple(s.all_token_ids[history_keep:])
        del held.history[history_keep:]
        held.history.extend(history_append)
        blocks_keep = _common_prefix(held.blocks, s.block_table)
        blocks_append = tuple(s.block_table[blocks_keep:])
        del held.blocks[blocks_keep:]
        held.blocks.extend(blocks_append)
        held.sampling, held.seed, held.num_prompt_tokens = s.sampling, s.seed, s.num_prompt_tokens

        known = len(s.token_ids) - s.num_draft_tokens
        if held.history[s.start_pos : s.start_pos + known] != list(s.token_ids[:known]):
            known = 0  # fed tokens that are not the history's: send them all
        return SequenceDelta(
            request_id=s.request_id,
            start_pos=s.start_pos,
            num_from_history=known,
            extra_token_ids=tuple(s.token_ids[known:]),
            is_prefill=s.is_prefill,
            sample=s.sample,
            want_prompt_logprobs=s.want_prompt_logprobs,
            num_draft_tokens=s.num_draft_tokens,
            history_keep=history_keep,
            history_append=history_append,
            blocks_keep=blocks_keep,
            blocks_append=blocks_append,
            sampling=s.sampling if changed else None,
            seed=s.seed if changed else None,
            num_prompt_tokens=s.num_prompt_tokens if changed else None,
        )


class BatchMirror:
    """A worker rank's side: `apply(delta)` updates the sequences it holds and returns the `ScheduledBatch`
    rank 0 encoded. Raises `DeltaMismatch` when the delta does not fit what it holds."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    @property
    def num_held(self) -> int:
        return len(self._held)

    def apply(self, delta: StepDelta) -> ScheduledBatch:
        for request_id in delta.freed_request_ids:
            self._held.pop(request_id, None)
        return ScheduledBatch(
            step=delta.step,
            sequences=[self._apply(d) for d in delta.sequences],
            num_prefill_seqs=delta.num_prefill_seqs,
            freed_request_ids=list(delta.freed_request_ids),
            token_masks=delta.token_masks,
        )

    def _apply(self, d: SequenceDelta) -> ScheduledSequence:
        held = self._held.get(d.request_id)
        if held is None:
            if d.sampling is None or d.seed is None or d.num_prompt_tokens is None:
                raise DeltaMismatch(f"step delta for request {d.request_id!r}, which this rank does not hold")
            held = _Held([], [], d.sampling, d.seed, d.num_prompt_tokens)
            self._held[d.request_id] = held
        elif d.sampling is not None:
            held.sampling, held.seed, held.num_prompt_tokens = d.sampling, d.seed, d.num_prompt_tokens
        if d.history_keep > len(held.history) or d.blocks_keep > len(held.blocks):
            raise DeltaMismatch(
                f"step delta for request {d.request_id!r} keeps {d.history_keep} tokens / {d.blocks_keep} "
                f"blocks, this rank holds {len(held.history)} / {len(held.blocks)}"
            )
        del held.history[d.history_keep :]
        held.history.extend(d.history_append)
        del held.blocks[d.blocks_keep :]
        held.blocks.extend(d.blocks_append)
        fed = held.history[d.start_pos : d.start_pos + d.num_from_history] + list(d.extra_token_ids)
        return ScheduledSequence(
            request_id=d.request_id,
            token_ids=fed,
            start_pos=d.start_pos,
            block_table=tuple(held.blocks),
            is_prefill=d.is_prefill,
            sample=d.sample,
            sampling=held.sampling,
            seed=held.seed,
            num_prompt_tokens=held.num_prompt_tokens,
            all_token_ids=held.history,  # live list, valid for the step, as the scheduler's
            want_prompt_logprobs=d.want_prompt_logprobs,
            num_draft_tokens=d.num_draft_tokens,
        )
