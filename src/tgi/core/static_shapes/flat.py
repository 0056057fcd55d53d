"""The flat layout of a compiled step (TPU/JAX; no torch here): the step's tokens on one axis padded to a
token bucket `T`, its sequences to a sequence bucket `S`, block tables to a width bucket `W`; ragged
attention, so prefill chunks and decodes share a step (`tgi.core.static_shapes`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.static_shapes.buckets import Buckets, ShapeError
from tgi.core.static_shapes.padding import blocks_read, sampled_indices, token_slots


@dataclass(frozen=True)
class StepShape:
    """A flat step's padded sizes: tokens `T`, sequences `S`, block-table width `W` (blocks per sequence)."""

    num_tokens: int
    num_seqs: int
    num_blocks: int


@dataclass
class FlatBatch:
    """A `ScheduledBatch` padded to a `StepShape` (numpy int32 arrays; a runner moves them to its device).

    Per token `t < T`: `input_ids`, `positions`, `slot_mapping` (padded tokens: `pad_slot`), `token_seq`
    (its sequence row; padded tokens: the last row, at position 0, so their attention stays finite).
    Per sequence row `r < S`: `block_tables[r, :W]` (padded with block 0, masked by `context_lens`),
    `context_lens` (`start_pos + num_tokens`; padded rows 0), `query_start[r]` (its first token;
    `query_start[S]` is the real token count). Per sampled row `j < S`: `sample_index[j]` (the token whose
    logits it samples; padded rows 0) and the sequence it is, `sampled[j]`, for `j < num_sampled`."""

    shape: StepShape
    input_ids: np.ndarray
    positions: np.ndarray
    slot_mapping: np.ndarray
    token_seq: np.ndarray
    block_tables: np.ndarray
    context_lens: np.ndarray
    query_start: np.ndarray
    sample_index: np.ndarray
    sampled: list[ScheduledSequence]
    num_tokens: int  # real tokens

    @property
    def num_sampled(self) -> int:
        return len(self.sampled)


@dataclass(frozen=True)
class FlatShapes:
    """The flat layout's buckets (module docstring). `token_buckets.max` is the step's token budget and
    `seq_buckets.max` its sequence limit; `block_buckets.max` covers the longest context
    (`ceil(max_context / block_size)`)."""

    token_buckets: Buckets
    seq_buckets: Buckets
    block_buckets: Buckets
    block_size: int

    @classmethod
    def for_limits(
        cls,
        max_batch_tokens: int,
        max_num_seqs: int,
        max_context: int,
        block_size: int,
        min_tokens: int = 16,
        min_seqs: int = 1,
        min_blocks: int = 8,
        factor: int = 2,
    ) -> FlatShapes:
        """Geometric buckets (`Buckets.geometric`, growing by `factor`) up to the engine's limits."""
        max_blocks = -(-max_context // block_size)
        return cls(
            Buckets.geometric(max_batch_tokens, min(min_tokens, max_batch_tokens), factor),
            Buckets.geometric(max_num_seqs, min(min_seqs, max_num_seqs), factor),
            Buckets.geometric(max_blocks, min(min_blocks, max_blocks), factor),
            block_size,
        )

    def constraints(self, chunked_prefill: bool = True) -> RunnerConstraints:
        """What the runner declares so that every step fits: at most `seq_buckets.max` sequences and
        `token_buckets.max` tokens."""
        return RunnerConstraints(
            max_batch_size=self.seq_buckets.max,
            chunked_prefill=chunked_prefill,
            mixed_batches=True,
            block_size=self.block_size,
            max_batch_tokens=self.token_buckets.max,
        )

    def shape_for(self, batch: ScheduledBatch) -> StepShape:
        width = max(blocks_read(s, self.block_size) for s in batch.sequences)
        return StepShape(
            self.token_buckets.fit(batch.num_tokens),
            self.seq_buckets.fit(len(batch.sequences)),
            self.block_buckets.fit(width),
        )

    def warmup_shapes(self) -> list[StepShape]:
        """Every shape a step can take: (T, S, W) such that some batch pads to it, i.e. more than
        `below(S)` sequences fit in T tokens and more than `below(T)` tokens fit in S sequences of W blocks."""
        shapes = []
        for t, s, w in itertools.product(
            self.token_buckets.sizes, self.seq_buckets.sizes, self.block_buckets.sizes
        ):
            if (
                self.seq_buckets.below(s) + 1 <= t
                and self.token_buckets.below(t) + 1 <= s * w * self.block_size
            ):
                shapes.append(StepShape(t, s, w))
        return shapes

    def pad(self, batch: ScheduledBatch, pad_slot: int, shape: StepShape | None = None) -> FlatBatch:
        """`batch` padded to `shape` (default: `shape_for(batch)`)."""
        shape = shape or self.shape_for(batch)
        t_pad, s_pad, w_pad = shape.num_tokens, shape.num_seqs, shape.num_blocks
        n, seqs = batch.num_tokens, batch.sequences
        if n > t_pad or len(seqs) > s_pad:
            raise ShapeError(f"{n} tokens of {len(seqs)} sequences do not fit {shape}")
        i32 = np.int32
        input_ids = np.zeros(t_pad, i32)
        positions = np.zeros(t_pad, i32)
        slot_mapping = np.full(t_pad, pad_slot, i32)
        token_seq = np.full(t_pad, s_pad - 1, i32)
        block_tables = np.zeros((s_pad, w_pad), i32)
        context_lens = np.zeros(s_pad, i32)
        query_start = np.full(s_pad + 1, n, i32)
        at = 0
        for r, s in enumerate(seqs):
            k, end = s.num_tokens, s.start_pos + s.num_tokens
            if blocks_read(s, self.block_size) > w_pad:
                raise ShapeError(f"{s.request_id}: {end} tokens of context exceed {w_pad} blocks")
            input_ids[at : at + k] = s.token_ids
            positions[at : at + k] = np.arange(s.start_pos, end)
            slot_mapping[at : at + k] = token_slots(s, self.block_size)
            token_seq[at : at + k] = r
            table = s.block_table[: min(len(s.block_table), w_pad)]
            block_tables[r, : len(table)] = table
            context_lens[r] = end
            query_start[r] = at
            at += k
        picked = sampled_indices(batch)
        sample_index = np.zeros(s_pad, i32)
        for j, i in enumerate(picked):
            sample_index[j] = query_start[i] + seqs[i].num_tokens - 1
        return FlatBatch(
            shape, input_ids, positions, slot_mapping, token_seq, block_tables, context_lens, query_start,
            sample_index, [seqs[i] for i in picked], n,
        )  # fmt: skip
