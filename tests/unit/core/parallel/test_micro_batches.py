"""A step cut in micro-batches of whole sequences, in batch order, token counts as even as they allow."""

from __future__ import annotations

import pytest

from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence
from tgi.core.parallel.micro_batches import split_micro_batches
from tgi.core.sampling_params import SamplingParams


def seq(rid: str, n: int, prefill: bool) -> ScheduledSequence:
    tokens = list(range(n))
    return ScheduledSequence(rid, tokens, 0, (0,), prefill, True, SamplingParams(), 0, n, tokens)


def batch(*lengths: int, prefills: int = 0, freed=("gone",)) -> ScheduledBatch:
    seqs = [seq(f"r{i}", n, i < prefills) for i, n in enumerate(lengths)]
    return ScheduledBatch(3, seqs, prefills, freed_request_ids=list(freed))


def shape(parts):
    return [[s.request_id for s in p.batch.sequences] for p in parts]


def test_decodes_split_evenly_and_in_order():
    parts = split_micro_batches(batch(1, 1, 1, 1), 2)
    assert shape(parts) == [["r0", "r1"], ["r2", "r3"]]
    assert [(p.first, p.token_start, p.num_tokens) for p in parts] == [(0, 0, 2), (2, 2, 2)]
    assert all(p.batch.step == 3 and p.batch.num_prefill_seqs == 0 for p in parts)


def test_a_prefill_chunk_and_decodes_balance_by_tokens_and_keep_prefills_first():
    parts = split_micro_batches(batch(6, 3, 1, 1, 1, prefills=2), 2)
    assert shape(parts) == [["r0"], ["r1", "r2", "r3", "r4"]]
    assert [p.batch.num_prefill_seqs for p in parts] == [1, 1]
    assert [p.token_start for p in parts] == [0, 6]
    assert [p.batch.freed_request_ids for p in parts] == [["gone"], []]  # freed once, with the first


def test_every_part_gets_a_sequence_and_whole_sequences_are_never_cut():
    parts = split_micro_batches(batch(20, 1, 1), 3)
    assert shape(parts) == [["r0"], ["r1"], ["r2"]]
    assert shape(split_micro_batches(batch(4, 1), 4)) == [["r0"], ["r1"]]  # fewer sequences than parts
    assert shape(split_micro_batches(batch(9, prefills=1), 2)) == [["r0"]]  # one long chunk: one part
    assert split_micro_batches(ScheduledBatch(0, [], 0), 2) == []
    with pytest.raises(ValueError, match=">= 1"):
        split_micro_batches(batch(1), 0)


def test_the_parts_cover_the_batch_exactly_for_any_count():
    lengths = (7, 2, 5, 1, 1, 1, 1)
    b = batch(*lengths, prefills=3)
    for count in range(1, 9):
        parts = split_micro_batches(b, count)
        assert len(parts) == min(count, len(lengths))
        assert [s for p in parts for s in p.batch.sequences] == b.sequences
        assert sum(p.num_tokens for p in parts) == b.num_tokens
