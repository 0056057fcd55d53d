"""What both layouts read of a scheduled batch to pad it (no torch here): the KV blocks a sequence reads,
the cache slots its tokens write, the sequences sampled; and `unpad`, the real rows of a padded result."""

from __future__ import annotations

import numpy as np

from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence
from tgi.core.static_shapes.buckets import ShapeError


def blocks_read(s: ScheduledSequence, block_size: int) -> int:
    """KV blocks `s` reads this step (its cached tokens and this chunk)."""
    return -(-(s.start_pos + s.num_tokens) // block_size)


def token_slots(s: ScheduledSequence, block_size: int) -> np.ndarray:
    """The cache slot each token of `s`'s chunk writes its keys/values to (block id x block size + offset)."""
    pos = np.arange(s.start_pos, s.start_pos + s.num_tokens)
    table = np.asarray(s.block_table, dtype=np.int64)
    return table[pos // block_size] * block_size + pos % block_size


def sampled_indices(batch: ScheduledBatch) -> list[int]:
    """Indices (in batch order) of the sequences to sample; one row each (no draft verification here)."""
    if any(s.num_draft_tokens for s in batch.sequences):
        raise ShapeError("static shapes sample one row per sequence: draft verification is not supported")
    return [i for i, s in enumerate(batch.sequences) if s.sample]


def unpad(rows, num_real: int):
    """The real rows of a padded per-row result (sampled tokens, logprobs): its first `num_real`."""
    return rows[:num_real]
