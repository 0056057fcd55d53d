"""A step's batch cut into micro-batches, so that pipeline stages work on different parts at once.

GPipe within a step: stage s runs micro-batch m while stage s + 1 runs m - 1; the step stays one
synchronous `execute` for the engine. With P stages and M micro-batches of equal work the pipeline is idle
for a fraction (P - 1) / (M + P - 1) of the step (the bubble): M = P gives (P - 1) / (2P - 1), a third at
P = 2, against (P - 1) / P (a half) without micro-batches.

A micro-batch is a run of whole sequences, in batch order (prefill chunks first, as in the batch), cut so
that the micro-batches' token counts are as even as whole sequences allow. Sequences never attend to each
other, so running them in separate forward passes computes what the whole batch does. A single sequence
(a decode at batch 1, one long prompt chunk) is not cut: it is one micro-batch, and its step has the full
bubble. Plain Python (no framework).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tgi.core.interfaces.batch import ScheduledBatch


@dataclass(frozen=True)
class MicroBatch:
    """Sequences `first .. first + len(batch.sequences) - 1` of the step's batch, whose tokens are the
    step's tokens `token_start .. token_start + batch.num_tokens - 1`."""

    batch: ScheduledBatch  # without token masks: the step samples all its rows at once, on the last stage
    first: int
    token_start: int

    @property
    def num_tokens(self) -> int:
        return self.batch.num_tokens


def split_micro_batches(batch: ScheduledBatch, count: int) -> list[MicroBatch]:
    """`batch` as at most `count` micro-batches of whole sequences with token counts as even as possible
    (fewer when the batch has fewer sequences); every rank that calls it on the same batch gets the same."""
    if count < 1:
        raise ValueError(f"micro-batches per step must be >= 1, got {count}")
    seqs = batch.sequences
    count = min(count, len(seqs))
    if count <= 1:
        return [MicroBatch(_part(batch, 0, len(seqs)), 0, 0)] if seqs else []
    sizes = [len(s.token_ids) for s in seqs]
    total = sum(sizes)
    cuts, done = [0], 0
    for i, size in enumerate(sizes[:-1]):
        done += size
        left_parts = count - len(cuts)  # micro-batches still to start
        # cut after sequence i once its share is reached, keeping one sequence for each part still to start
        if left_parts > 0 and done * count >= total * len(cuts) and len(seqs) - (i + 1) >= left_parts:
            cuts.append(i + 1)
        elif left_parts > 0 and len(seqs) - (i + 1) == left_parts:
            cuts.append(i + 1)  # as many sequences left as parts: one each
    cuts.append(len(seqs))
    parts, token_start = [], 0
    for a, b in itertools.pairwise(cuts):
        parts.append(MicroBatch(_part(batch, a, b), a, token_start))
        token_start += sum(sizes[a:b])
    return parts


def _part(batch: ScheduledBatch, a: int, b: int) -> ScheduledBatch:
    return ScheduledBatch(
        step=batch.step,
        sequences=batch.sequences[a:b],
        num_prefill_seqs=max(0, min(batch.num_prefill_seqs, b) - a),
        freed_request_ids=list(batch.freed_request_ids) if a == 0 else [],
    )
