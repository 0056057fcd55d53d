"""The wire format: our batches read back by a decoder declared from vLLM's definitions
(tests/helpers/vllm_kv_events.py), and the msgpack layout itself (the batch an array, events maps tagged under
"type", bin hashes)."""

from __future__ import annotations

import msgspec
import vllm_kv_events as vllm

from tgi.core.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from tgi.core.kv_events.wire import decode_batch, encode_batch

H1, H2, H3 = (bytes([i]) * 32 for i in (1, 2, 3))


def test_vllm_decoder_reads_every_event() -> None:
    events = [
        BlockStored([H1, H2], None, list(range(8)), 4, None, "GPU"),
        BlockStored([H3], H2, [8, 9, 10, 11], 4, 12345, "GPU", "sql"),
        BlockRemoved([H1], "GPU"),
        AllBlocksCleared(),
    ]
    batch = vllm.decode(encode_batch(1700000000.5, events, 0))
    assert batch.ts == 1700000000.5 and batch.data_parallel_rank == 0
    first, second, removed, cleared = batch.events
    assert isinstance(first, vllm.BlockStored)
    assert first.block_hashes == [H1, H2] and first.parent_block_hash is None
    assert first.token_ids == list(range(8)) and first.block_size == 4
    assert first.lora_id is None and first.medium == "GPU" and first.lora_name is None
    assert second.parent_block_hash == H2 and (second.lora_id, second.lora_name) == (12345, "sql")
    assert isinstance(removed, vllm.BlockRemoved) and removed.block_hashes == [H1]
    assert isinstance(cleared, vllm.AllBlocksCleared)


def test_layout_is_an_array_of_maps_tagged_by_class_name() -> None:
    events = [BlockStored([H2], H1, [1, 2], 2, None, "GPU"), BlockRemoved([H1], "GPU"), AllBlocksCleared()]
    raw = msgspec.msgpack.decode(encode_batch(2.0, events, 0))
    stored = {
        "type": "BlockStored",
        "block_hashes": [H2],
        "parent_block_hash": H1,
        "token_ids": [1, 2],
        "block_size": 2,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
    }
    removed = {"type": "BlockRemoved", "block_hashes": [H1], "medium": "GPU"}
    assert raw == [2.0, [stored, removed, {"type": "AllBlocksCleared"}], 0]


def test_an_empty_batch_round_trips() -> None:
    back = decode_batch(encode_batch(3.0, [], 0))
    assert back.ts == 3.0 and back.events == [] and back.data_parallel_rank == 0
