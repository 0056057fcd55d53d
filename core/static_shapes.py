"""Static shapes for runners that compile whole steps (TPU/JAX, Gaudi graphs, Neuron): no torch here.

A compiled step has fixed array shapes. This module picks them and moves a `ScheduledBatch` into and out
of them, for every such backend:

* **Buckets** (`Buckets`): the sizes a dimension may take; a real size is padded up to the smallest bucket
  that holds it (`Buckets.fit`), and a size above the largest is an error, never a silent truncation.
  `Buckets.multiples(step, maximum)` is TGI Gaudi's rule (`BATCH_BUCKET_SIZE`, `PREFILL_BATCH_BUCKET_SIZE`,
  `PAD_SEQUENCE_TO_MULTIPLE_OF`: pad to a multiple of `step`); `Buckets.powers_of_two(maximum)` doubles
  (vLLM's TPU runner), always ending at `maximum` itself.
* **Two layouts** of a step:
  - *flat* (`FlatShapes`, `StepShape`): the step's tokens on one axis, padded to a token bucket `T`; its
    sequences padded to a sequence bucket `S`; block tables padded to a width bucket `W`. Ragged attention
    (each token attends to its own sequence's cache up to its position), so prefill chunks and decodes may
    share a step (`mixed_batches=True`);
  - *rows* (`RowShapes`, `RowShape`): one row per sequence, `[B, L]` (Gaudi's layout); a step is either
    all prefill chunks (each padded to a prefill bucket `L`) or all decodes (`L = 1`), `mixed_batches=False`.
* **Constraints**: `constraints()` of each policy is the `RunnerConstraints` a runner declares, so the
  scheduler only builds steps that fit a bucket (the row layout also declares its prefill row buckets and
  the padded-area bound `B x L`, which the scheduler keeps each prefill step within); `warmup_shapes()` lists every shape such a step can take
  (each is compiled at warm-up: a step never compiles while serving); `shape_for(batch)` is the one a batch
  takes, and it is always one of `warmup_shapes()` (tests/unit/core/test_static_shapes.py drives the scheduler
  to check it).
* **Padding** (`FlatShapes.pad`, `RowShapes.pad`): numpy arrays of the padded step. Padding never reaches
  an output: padded tokens write their keys/values to `pad_slot` (a slot the runner drops or reserves,
  e.g. one past the cache for JAX's `mode="drop"` scatters), padded sequences are never sampled, and only
  the first `num_sampled` rows of what a runner samples are real (`unpad`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence
from tgi.core.interfaces.types import RunnerConstraints


class ShapeError(ValueError):
    """A batch does not fit the largest bucket (the scheduler was given other constraints than these)."""


@dataclass(frozen=True)
class Buckets:
    """The sizes one dimension may take, ascending; `fit(n)` is the smallest that holds `n`."""

    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.sizes or any(s < 1 for s in self.sizes) or list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError(f"buckets must be distinct positive sizes in ascending order, got {self.sizes}")

    @classmethod
    def multiples(cls, step: int, maximum: int) -> Buckets:
        """`step, 2*step, ...` up to `maximum`, which is always the last (TGI Gaudi's bucket sizes)."""
        if step < 1 or maximum < 1:
            raise ValueError(f"bucket step and maximum must be >= 1, got {step} and {maximum}")
        return cls((*range(step, maximum, step), maximum))

    @classmethod
    def powers_of_two(cls, maximum: int, minimum: int = 1) -> Buckets:
        """`minimum, 2*minimum, 4*minimum, ...` below `maximum`, then `maximum`."""
        return cls.geometric(maximum, minimum, 2)

    @classmethod
    def geometric(cls, maximum: int, minimum: int = 1, factor: int = 2) -> Buckets:
        """`minimum, factor*minimum, factor**2*minimum, ...` below `maximum`, then `maximum` (a larger
        factor: fewer buckets, so fewer compiles, and more padding)."""
        if minimum < 1 or maximum < 1 or factor < 2:
            raise ValueError(
                f"bucket minimum and maximum must be >= 1 and the factor >= 2, got {minimum}, {maximum}, {factor}"
            )
        sizes, s = [], minimum
        while s < maximum:
            sizes.append(s)
            s *= factor
        return cls((*sizes, maximum))

    @property
    def max(self) -> int:
        return self.sizes[-1]

    def fit(self, n: int) -> int:
        """The smallest bucket >= n; `ShapeError` when n exceeds the largest."""
        for s in self.sizes:
            if s >= n:
                return s
        raise ShapeError(f"{n} exceeds the largest bucket {self.max}")

    def below(self, size: int) -> int:
        """The bucket before `size` (0 for the first): sizes above it and up to `size` pad to `size`."""
        i = self.sizes.index(size)
        return self.sizes[i - 1] if i else 0


def _blocks(s: ScheduledSequence, block_size: int) -> int:
    """KV blocks `s` reads this step (its cached tokens and this chunk)."""
    return -(-(s.start_pos + s.num_tokens) // block_size)


def _slots(s: ScheduledSequence, block_size: int) -> np.ndarray:
    pos = np.arange(s.start_pos, s.start_pos + s.num_tokens)
    table = np.asarray(s.block_table, dtype=np.int64)
    return table[pos // block_size] * block_size + pos % block_size


def _sampled(batch: ScheduledBatch) -> list[int]:
    """Indices (in batch order) of the sequences to sample; one row each (no draft verification here)."""
    if any(s.num_draft_tokens for s in batch.sequences):
        raise ShapeError("static shapes sample one row per sequence: draft verification is not supported")
    return [i for i, s in enumerate(batch.sequences) if s.sample]


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


def unpad(rows, num_real: int):
    """The real rows of a padded per-row result (sampled tokens, logprobs): its first `num_real`."""
    return rows[:num_real]


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
        width = max(_blocks(s, self.block_size) for s in batch.sequences)
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
            if _blocks(s, self.block_size) > w_pad:
                raise ShapeError(f"{s.request_id}: {end} tokens of context exceed {w_pad} blocks")
            input_ids[at : at + k] = s.token_ids
            positions[at : at + k] = np.arange(s.start_pos, end)
            slot_mapping[at : at + k] = _slots(s, self.block_size)
            token_seq[at : at + k] = r
            table = s.block_table[: min(len(s.block_table), w_pad)]
            block_tables[r, : len(table)] = table
            context_lens[r] = end
            query_start[r] = at
            at += k
        picked = _sampled(batch)
        sample_index = np.zeros(s_pad, i32)
        for j, i in enumerate(picked):
            sample_index[j] = query_start[i] + seqs[i].num_tokens - 1
        return FlatBatch(
            shape, input_ids, positions, slot_mapping, token_seq, block_tables, context_lens, query_start,
            sample_index, [seqs[i] for i in picked], n,
        )  # fmt: skip


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
        width = self.block_buckets.fit(max(_blocks(s, self.block_size) for s in seqs))
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
            if k > l_pad or _blocks(s, self.block_size) > w_pad:
                raise ShapeError(f"{s.request_id}: {k} tokens at {s.start_pos} do not fit {shape}")
            input_ids[r, :k] = s.token_ids
            positions[r, :k] = np.arange(s.start_pos, end)
            slot_mapping[r, :k] = _slots(s, self.block_size)
            table = s.block_table[: min(len(s.block_table), w_pad)]
            block_tables[r, : len(table)] = table
            context_lens[r] = end
            num_tokens[r] = k
        picked = _sampled(batch)
        sample_index = np.maximum(num_tokens - 1, 0).astype(i32)
        return RowBatch(
            shape, input_ids, positions, slot_mapping, block_tables, context_lens, num_tokens, sample_index,
            np.asarray(picked, i32), [seqs[i] for i in picked],
        )  # fmt: skip
