"""The row layout of a compiled step (Gaudi's `[B, L]`; no torch here): one row per sequence; a step is
all prefill chunks (each padded to a prefill bucket `L`, the area `B x L` bounded) or all decodes (`L = 1`)
(`tgi.core.static_shapes`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.static_shapes.buckets import Buckets, ShapeError
from tgi.core.static_shapes.padding import blocks_read, sampled_indices, token_slots


@dataclass(frozen=True)
class RowShape:
    """A row step's padded sizes: rows `B`, tokens per row `L` (1 for decodes), block-table width `W`."""

    num_rows: int
    row_len: int
    num_blocks: int
    is_prefill: bool


@dataclass
class RowBatch:
    """A `ScheduledBatch` padded to a `RowShape`: `[B, L]` int32 `input_ids`, `positions`,
    `slot_mapping` (padding: `pad_slot`); per row `block_tables[B, W]`, `context_lens` (0 for padded rows),
    `num_tokens`, `sample_index` (the position in its row of the token it samples). `sampled_rows[j]` is the
    row of the j-th sampled sequence `sampled[j]` (rows follow batch order)."""

    shape: RowShape
    input_ids: np.ndarray
    positions: np.ndarray
    slot_mapping: np.ndarray
    block_tables: np.ndarray
    context_lens: np.ndarray
    num_tokens: np.ndarray
    sample_index: np.ndarray
    sampled_rows: np.ndarray
    sampled: list[ScheduledSequence]

    @property
    def num_sampled(self) -> int:
        return len(self.sampled)


@dataclass(frozen=True)
class RowShapes:
    """The row layout's buckets: `decode_buckets` (decode batch sizes, Gaudi's `BATCH_BUCKET_SIZE`),
    `prefill_batch_buckets` (Gaudi's `PREFILL_BATCH_BUCKET_SIZE`), `prefill_buckets` (chunk lengths, Gaudi's
    `PAD_SEQUENCE_TO_MULTIPLE_OF`), `block_buckets` (block-table widths). The scheduler's sequence limit
    is `decode_buckets.max`; a prefill step has at most `prefill_batch_buckets.max` sequences, so that limit
    must not be below the sequence limit (a step after preemption may re-prefill that many).
    `max_padded_prefill_tokens` (None: unbounded) bounds a prefill step's padded area `B x L` (TGI Gaudi's
    max_batch_prefill_tokens): the scheduler keeps every prefill step within it and only shapes within it
    are warmed; the smallest prefill shape must fit it."""

    decode_buckets: Buckets
    prefill_batch_buckets: Buckets
    prefill_buckets: Buckets
    block_buckets: Buckets
    block_size: int
    max_padded_prefill_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.prefill_batch_buckets.max < self.decode_buckets.max:
            raise ValueError(
                f"prefill batch buckets (max {self.prefill_batch_buckets.max}) must hold the sequence limit "
                f"{self.decode_buckets.max}"
            )
        smallest = self.prefill_batch_buckets.sizes[0] * self.prefill_buckets.sizes[0]
        if self.max_padded_prefill_tokens is not None and smallest > self.max_padded_prefill_tokens:
            raise ValueError(
                f"the smallest prefill shape ({self.prefill_batch_buckets.sizes[0]} rows x "
                f"{self.prefill_buckets.sizes[0]} tokens) exceeds max_padded_prefill_tokens "
                f"{self.max_padded_prefill_tokens}"
            )

    def constraints(self, chunked_prefill: bool = True) -> RunnerConstraints:
        """What the runner declares: no mixed steps, at most `decode_buckets.max` sequences, chunks up to
        the largest prefill bucket, and prefill steps padded to `[B, L]` within `max_padded_prefill_tokens`."""
        return RunnerConstraints(
            max_batch_size=self.decode_buckets.max,
            prefill_buckets=self.prefill_buckets.sizes,
            chunked_prefill=chunked_prefill,
            mixed_batches=False,
            block_size=self.block_size,
            prefill_batch_buckets=self.prefill_batch_buckets.sizes,
            max_padded_prefill_tokens=self.max_padded_prefill_tokens,
        )

    def shape_for(self, batch: ScheduledBatch) -> RowShape:
        seqs = batch.sequences
        prefill = batch.num_prefill_seqs > 0
        if prefill and batch.num_prefill_seqs != len(seqs):
            raise ShapeError("the row layout cannot mix prefill chunks and decodes in one step")
        width = self.block_buckets.fit(max(blocks_read(s, self.block_size) for s in seqs))
        if prefill:
            longest = max(s.num_tokens for s in seqs)
            return RowShape(
                self.prefill_batch_buckets.fit(len(seqs)), self.prefill_buckets.fit(longest), width, True
            )
        return RowShape(self.decode_buckets.fit(len(seqs)), 1, width, False)

    def warmup_shapes(self) -> list[RowShape]:
        """Every shape a step can take (prefill: every batch x chunk length x width bucket whose width can
        hold a chunk more than the bucket below and whose area `B x L` is within `max_padded_prefill_tokens`;
        decode: every batch x width)."""
        area = self.max_padded_prefill_tokens
        shapes = [
            RowShape(b, length, w, True)
            for b, length, w in itertools.product(
                self.prefill_batch_buckets.sizes, self.prefill_buckets.sizes, self.block_buckets.sizes
            )
            if self.prefill_buckets.below(length) + 1 <= w * self.block_size
            and (area is None or b * length <= area)
        ]
        shapes += [
            RowShape(b, 1, w, False)
            for b, w in itertools.product(self.decode_buckets.sizes, self.block_buckets.sizes)
        ]
        return shapes

    def pad(self, batch: ScheduledBatch, pad_slot: int, shape: RowShape | None = None) -> RowBatch:
        shape = shape or self.shape_for(batch)
        b_pad, l_pad, w_pad = shape.num_rows, shape.row_len, shape.num_blocks
        seqs = batch.sequences
        if len(seqs) > b_pad:
            raise ShapeError(f"{len(seqs)} sequences do not fit {shape}")
        i32 = np.int32
        input_ids = np.zeros((b_pad, l_pad), i32)
        positions = np.zeros((b_pad, l_pad), i32)
        slot_mapping = np.full((b_pad, l_pad), pad_slot, i32)
        block_tables = np.zeros((b_pad, w_pad), i32)
        context_lens = np.zeros(b_pad, i32)
        num_tokens = np.zeros(b_pad, i32)
        for r, s in enumerate(seqs):
            k, end = s.num_tokens, s.start_pos + s.num_tokens
            if k > l_pad or blocks_read(s, self.block_size) > w_pad:
                raise ShapeError(f"{s.request_id}: {k} tokens at {s.start_pos} do not fit {shape}")
            input_ids[r, :k] = s.token_ids
            positions[r, :k] = np.arange(s.start_pos, end)
            slot_mapping[r, :k] = token_slots(s, self.block_size)
            table = s.block_table[: min(len(s.block_table), w_pad)]
            block_tables[r, : len(table)] = table
            context_lens[r] = end
            num_tokens[r] = k
        picked = sampled_indices(batch)
        sample_index = np.maximum(num_tokens - 1, 0).astype(i32)
        return RowBatch(
            shape, input_ids, positions, slot_mapping, block_tables, context_lens, num_tokens, sample_index,
            np.asarray(picked, i32), [seqs[i] for i in picked],
        )  # fmt: skip
