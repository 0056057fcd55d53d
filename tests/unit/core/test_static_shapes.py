"""Static shapes (src/tgi/core/static_shapes.py): buckets, warm-up shapes, padding (no torch).

The scheduler is driven with the constraints each layout declares, and every batch goes through a fake
paged model that only sees the padded arrays (with garbage where they are padded): each batch must take a
warmed shape, and the outputs must equal an unpadded run (padding never leaks into outputs).
"""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
from fake_paged_model import FakePagedModel
from test_scheduler import drive, random_workload

from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence, StepOutput
from tgi.core.sampling_params import SamplingParams
from tgi.core.static_shapes import Buckets, FlatShapes, RowShapes, ShapeError, StepShape, unpad


def test_static_shapes_import_no_framework() -> None:
    code = "import sys, tgi.core.static_shapes; print('torch' in sys.modules or 'jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_buckets() -> None:
    assert Buckets.multiples(8, 20).sizes == (8, 16, 20)
    assert Buckets.multiples(4, 8).sizes == (4, 8)
    assert Buckets.powers_of_two(48, 16).sizes == (16, 32, 48)
    assert Buckets.powers_of_two(1).sizes == (1,)
    assert Buckets.geometric(100, 4, factor=4).sizes == (4, 16, 64, 100)
    b = Buckets((4, 8, 16))
    assert [b.fit(n) for n in (1, 4, 5, 16)] == [4, 4, 8, 16]
    assert b.below(4) == 0 and b.below(16) == 8
    with pytest.raises(ShapeError, match="exceeds the largest bucket 16"):
        b.fit(17)
    for bad in ((), (4, 2), (0, 4), (4, 4)):
        with pytest.raises(ValueError):
            Buckets(bad)


def _seq(rid, tokens, start, table, prefill, sample=True) -> ScheduledSequence:
    return ScheduledSequence(
        request_id=rid, token_ids=tokens, start_pos=start, block_table=table, is_prefill=prefill,
        sample=sample, sampling=SamplingParams(), seed=0, num_prompt_tokens=start + len(tokens),
        all_token_ids=list(range(start + len(tokens))),
    )  # fmt: skip


def test_flat_padding_by_hand() -> None:
    shapes = FlatShapes(Buckets((4, 8)), Buckets((2, 4)), Buckets((2, 4)), block_size=2)
    batch = ScheduledBatch(
        1,
        [_seq("p", [5, 6, 7], 0, (3, 1), True, sample=False), _seq("d", [9], 4, (0, 2, 4), False)],
        num_prefill_seqs=1,
    )
    assert shapes.shape_for(batch) == StepShape(4, 2, 4)
    fb = shapes.pad(batch, pad_slot=99)
    assert fb.input_ids.tolist() == [5, 6, 7, 9]
    assert fb.positions.tolist() == [0, 1, 2, 4]
    assert fb.slot_mapping.tolist() == [6, 7, 2, 8]  # block 3 slots 6, 7; block 1 slot 2; block 4 slot 8
    assert fb.token_seq.tolist() == [0, 0, 0, 1]
    assert fb.block_tables.tolist() == [[3, 1, 0, 0], [0, 2, 4, 0]]
    assert fb.context_lens.tolist() == [3, 5] and fb.query_start.tolist() == [0, 3, 4]
    assert [s.request_id for s in fb.sampled] == ["d"] and fb.sample_index[0] == 3
    big = shapes.pad(batch, pad_slot=99, shape=StepShape(8, 4, 4))
    assert big.slot_mapping[4:].tolist() == [99] * 4 and big.token_seq[4:].tolist() == [3] * 4
    assert big.context_lens[2:].tolist() == [0, 0] and big.query_start[2:].tolist() == [4, 4, 4]
    assert unpad(np.arange(4), big.num_sampled).tolist() == [0]
    with pytest.raises(ShapeError):
        shapes.pad(batch, 99, StepShape(2, 2, 4))


def test_row_layout_refuses_mixed_steps() -> None:
    shapes = RowShapes(Buckets((2,)), Buckets((2,)), Buckets((4,)), Buckets((4,)), block_size=2)
    batch = ScheduledBatch(1, [_seq("p", [5], 0, (1,), True), _seq("d", [9], 2, (0, 2), False)], 1)
    with pytest.raises(ShapeError, match="cannot mix"):
        shapes.shape_for(batch)
    with pytest.raises(ValueError, match="sequence limit"):
        RowShapes(Buckets((4,)), Buckets((2,)), Buckets((4,)), Buckets((4,)), block_size=2)


def test_row_layout_bounds_the_padded_prefill_area() -> None:
    kw = dict(decode_buckets=Buckets((2, 4)), prefill_batch_buckets=Buckets((2, 4)),
              prefill_buckets=Buckets((4, 8, 16)), block_buckets=Buckets((4,)), block_size=4)  # fmt: skip
    unbounded = RowShapes(**kw)
    assert {(s.num_rows, s.row_len) for s in unbounded.warmup_shapes() if s.is_prefill} == {
        (b, n) for b in (2, 4) for n in (4, 8, 16)
    }
    assert unbounded.constraints().max_padded_prefill_tokens is None
    shapes = RowShapes(**kw, max_padded_prefill_tokens=16)
    assert {(s.num_rows, s.row_len) for s in shapes.warmup_shapes() if s.is_prefill} == {
        (2, 4),
        (2, 8),
        (4, 4),
    }
    assert [s for s in shapes.warmup_shapes() if not s.is_prefill] == [
        s for s in unbounded.warmup_shapes() if not s.is_prefill
    ]  # decode shapes are not bounded by it
    c = shapes.constraints()
    assert (c.prefill_batch_buckets, c.max_padded_prefill_tokens) == ((2, 4), 16)
    with pytest.raises(ValueError, match=r"smallest prefill shape \(2 rows x 4 tokens\) exceeds"):
        RowShapes(**kw, max_padded_prefill_tokens=7)


class PaddedFakeModel(FakePagedModel):
    """The scheduler test's fake paged model, run on a batch's padded arrays only (padded entries filled
    with garbage first), checking that the batch takes a warmed shape."""

    def __init__(self, shapes: FlatShapes | RowShapes, num_blocks: int, block_size: int, seed: int) -> None:
        super().__init__(num_blocks, block_size)
        self.shapes = shapes
        self.warm = set(shapes.warmup_shapes())
        self.pad_slot = num_blocks * block_size  # one past the cache: dropped
        self.rng = np.random.default_rng(seed)
        self.used: set = set()

    def _garbage(self, a: np.ndarray, real: np.ndarray) -> None:
        a[~real] = self.rng.integers(0, 1000, size=int((~real).sum()))

    def execute(self, batch: ScheduledBatch) -> StepOutput:
        out = super().execute(batch)  # prompt logprob bookkeeping; its tokens are replaced below
        shape = self.shapes.shape_for(batch)
        assert shape in self.warm, f"{shape} was not warmed up"
        self.used.add(shape)
        if isinstance(self.shapes, FlatShapes):
            tokens = self._flat(batch)
        else:
            tokens = self._rows(batch)
        assert len(tokens) == len(out.token_ids)
        out.token_ids = tokens
        return out

    def _write(self, rid: str, pos: int, tok: int, slot: int) -> None:
        if slot != self.pad_slot:
            self.slots[slot] = (rid, pos, tok)

    def _read(self, rid: str, table: np.ndarray, length: int) -> int:
        h = 0
        for pos in range(length):
            got = self.slots[int(table[pos // self.block_size]) * self.block_size + pos % self.block_size]
            assert got[:2] == (rid, pos)
            h = (h * 31 + got[2] + 1) % 1_000_003
        return h % 1000

    def _flat(self, batch: ScheduledBatch) -> list[int]:
        fb = self.shapes.pad(batch, self.pad_slot)
        real = np.arange(fb.shape.num_tokens) < fb.num_tokens
        assert (fb.slot_mapping[~real] == self.pad_slot).all()
        self._garbage(fb.input_ids, real)
        self._garbage(fb.positions, real)
        rids = [s.request_id for s in batch.sequences] + ["pad"] * fb.shape.num_seqs
        for t in range(fb.shape.num_tokens):  # padded tokens write nowhere
            self._write(
                rids[fb.token_seq[t]], int(fb.positions[t]), int(fb.input_ids[t]), int(fb.slot_mapping[t])
            )
        rows = []
        for j in range(fb.num_sampled):
            r = fb.token_seq[fb.sample_index[j]]
            rows.append(self._read(rids[r], fb.block_tables[r], int(fb.context_lens[r])))
        padded = rows + [-1] * (fb.shape.num_seqs - len(rows))  # what a runner computes for padded rows
        return list(unpad(padded, fb.num_sampled))

    def _rows(self, batch: ScheduledBatch) -> list[int]:
        rb = self.shapes.pad(batch, self.pad_slot)
        b, length = rb.shape.num_rows, rb.shape.row_len
        real = np.arange(length)[None, :] < rb.num_tokens[:, None]
        assert (rb.slot_mapping[~real] == self.pad_slot).all()
        self._garbage(rb.input_ids, real)
        rids = [s.request_id for s in batch.sequences] + ["pad"] * b
        for r in range(b):
            for i in range(length):
                self._write(
                    rids[r], int(rb.positions[r, i]), int(rb.input_ids[r, i]), int(rb.slot_mapping[r, i])
                )
        return [self._read(rids[r], rb.block_tables[r], int(rb.context_lens[r])) for r in rb.sampled_rows]


@pytest.mark.parametrize("seed", range(10))
def test_every_scheduled_batch_takes_a_warmed_shape_and_padding_never_leaks(seed: int) -> None:
    rng = random.Random(seed)
    chunked = rng.random() < 0.8
    # without chunked prefill every context (prompt and output, on recomputation) must fit one prefill
    reqs = random_workload(rng, rng.randint(5, 14), **({} if chunked else {"max_prompt": 4, "max_new": 4}))
    block_size, num_blocks, max_tokens = 4, 14, rng.randint(8, 24)
    max_context = num_blocks * block_size
    if seed % 2:
        shapes = FlatShapes.for_limits(max_tokens, rng.choice((3, 6)), max_context, block_size, min_tokens=4,
                                       min_blocks=2, factor=rng.choice((2, 4)))  # fmt: skip
    else:
        shapes = RowShapes(
            decode_buckets=Buckets.multiples(2, rng.choice((3, 6))),
            prefill_batch_buckets=Buckets.multiples(3, 6),
            prefill_buckets=Buckets.multiples(4, rng.choice((8, 12))),
            block_buckets=Buckets.powers_of_two(num_blocks, 2),
            block_size=block_size,
            # the padded prefill area B x L (drawn apart: the draws above stay those of the seed)
            max_padded_prefill_tokens=random.Random(seed + 1000).choice((None, 12, 24)),
        )
    c = shapes.constraints(chunked_prefill=chunked)
    reference = drive(reqs, num_blocks=400, max_num_seqs=16, max_batch_tokens=64)
    model = PaddedFakeModel(shapes, num_blocks, block_size, seed)
    tight = drive(reqs, num_blocks=num_blocks, block_size=block_size, max_num_seqs=6, max_batch_tokens=max_tokens,
                  constraints=c, model=model)  # fmt: skip
    assert tight.outputs == reference.outputs
    assert model.used  # some batches ran through the padded arrays
