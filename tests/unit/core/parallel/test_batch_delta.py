"""A step as deltas: the mirror rebuilds rank 0's batch field by field through prefill, decode, preemption and
recomputation, a block-table rewrite, speculative guesses and a LoRA switch; a decode step's delta does not
grow with the context."""

from __future__ import annotations

import dataclasses

import pytest

from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence
from tgi.core.parallel.batch_delta import BatchMirror, DeltaEncoder, DeltaMismatch
from tgi.core.parallel.command_channel import decode_command, encode_command
from tgi.core.sampling_params import SamplingParams

PARAMS = SamplingParams(max_new_tokens=8)


def seq(rid, history, start, n, blocks, *, prefill, drafts=(), params=PARAMS, seed=7, prompt=None):
    fed = list(history[start : start + n]) + list(drafts)
    return ScheduledSequence(
        request_id=rid,
        token_ids=fed,
        start_pos=start,
        block_table=tuple(blocks),
        is_prefill=prefill,
        sample=start + n == len(history),
        sampling=params,
        seed=seed,
        num_prompt_tokens=len(history) if prompt is None else prompt,
        all_token_ids=history,
        num_draft_tokens=len(drafts),
    )


def fields(batch: ScheduledBatch):
    rows = [
        {
            f.name: (list(v) if isinstance(v := getattr(s, f.name), list | tuple) else v)
            for f in dataclasses.fields(s)
        }
        for s in batch.sequences
    ]
    return batch.step, batch.num_prefill_seqs, list(batch.freed_request_ids), rows


def roundtrip(encoder, mirror, batch):
    _, (delta,) = decode_command(
        encode_command("execute", (encoder.encode(batch),))
    )  # as it crosses the wire
    rebuilt = mirror.apply(delta)
    assert fields(rebuilt) == fields(batch)
    return delta


def test_mirror_rebuilds_every_step_of_a_sequence_life():
    enc, mirror = DeltaEncoder(), BatchMirror()
    a = list(range(10, 22))  # 12 prompt tokens
    roundtrip(enc, mirror, ScheduledBatch(1, [seq("a", a, 0, 8, [3, 4], prefill=True, prompt=12)], 1))
    roundtrip(enc, mirror, ScheduledBatch(2, [seq("a", a, 8, 4, [3, 4, 9], prefill=True, prompt=12)], 1))
    a.append(99)  # the sampled token
    delta = roundtrip(
        enc, mirror, ScheduledBatch(3, [seq("a", a, 12, 1, [3, 4, 9], prefill=False, prompt=12)], 0)
    )
    (d,) = delta.sequences
    assert d.history_append == (99,) and d.blocks_append == () and d.sampling is None
    # speculative: the last token and two guesses, the guesses not in the history
    a.append(5)
    delta = roundtrip(
        enc,
        mirror,
        ScheduledBatch(4, [seq("a", a, 13, 1, [3, 4, 9], prefill=False, drafts=(61, 62), prompt=12)], 0),
    )
    assert delta.sequences[0].extra_token_ids == (61, 62)
    # preempted: freed, then recomputed from position 0 on other blocks (sent whole again)
    b = [1, 2, 3]
    delta = roundtrip(
        enc,
        mirror,
        ScheduledBatch(
            5,
            [seq("a", a, 0, 8, [7, 8], prefill=True, prompt=12), seq("b", b, 0, 3, [1], prefill=True)],
            2,
            freed_request_ids=["a"],
        ),
    )
    assert delta.sequences[0].history_keep == 0 and delta.sequences[0].sampling == PARAMS
    assert enc.num_held == mirror.num_held == 2


def test_block_table_rewrite_and_lora_switch_are_sent():
    enc, mirror = DeltaEncoder(), BatchMirror()
    h = list(range(40))
    roundtrip(enc, mirror, ScheduledBatch(1, [seq("r", h, 0, 40, [1, 2, 3], prefill=True)], 1))
    h.append(3)
    lora = dataclasses.replace(PARAMS, adapter_id="french")
    delta = roundtrip(
        enc, mirror, ScheduledBatch(2, [seq("r", h, 40, 1, [1, 2, 8], prefill=False, params=lora)], 0)
    )
    (d,) = delta.sequences
    assert (d.blocks_keep, d.blocks_append) == (2, (8,)) and d.sampling == lora


def test_a_sequence_the_mirror_does_not_hold_is_refused():
    enc = DeltaEncoder()
    h = list(range(5))
    enc.encode(ScheduledBatch(1, [seq("x", h, 0, 5, [1], prefill=True)], 1))
    h.append(1)
    delta = enc.encode(ScheduledBatch(2, [seq("x", h, 5, 1, [1], prefill=False)], 0))
    with pytest.raises(DeltaMismatch, match="'x'"):
        BatchMirror().apply(delta)


@pytest.mark.parametrize("num_seqs", [1, 4])
def test_decode_delta_does_not_grow_with_the_context(num_seqs):
    def decode_bytes(context: int) -> int:
        enc = DeltaEncoder()
        histories = {f"r{i}": list(range(context)) for i in range(num_seqs)}
        blocks = {rid: list(range(context // 16 + 1)) for rid in histories}
        prefill = [seq(r, h, 0, context, blocks[r], prefill=True) for r, h in histories.items()]
        enc.encode(ScheduledBatch(1, prefill, num_seqs))
        for h in histories.values():
            h.append(42)
        decode = [seq(r, h, context, 1, blocks[r], prefill=False) for r, h in histories.items()]
        return len(encode_command("execute", (enc.encode(ScheduledBatch(2, decode, 0)),)))

    small, large = decode_bytes(128), decode_bytes(4096)
    assert large <= small * 1.10, (small, large)
