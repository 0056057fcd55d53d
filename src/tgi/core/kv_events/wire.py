"""A step's KV events as vLLM puts them on the wire: a `KVEventBatch(ts, events, data_parallel_rank)`,
msgpack-encoded by msgspec from structs declared as vLLM declares its own: the batch `array_like` (an array
`[ts, events, rank]`), each event a map of its fields tagged by its class name under "type" (a tagged union
`BlockStored | BlockRemoved | AllBlocksCleared`), fields with a default left out when they hold it. Block hashes
are msgpack bin (our 32-byte hashes); vLLM's `ExternalBlockHash` is bytes or int, so its decoder reads them.
"""

from __future__ import annotations

import msgspec

from tgi.core.kv_events import events as ev


class _Batch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class _Event(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(_Event):
    block_hashes: list[bytes]
    parent_block_hash: bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None


class BlockRemoved(_Event):
    block_hashes: list[bytes]
    medium: str | None


class AllBlocksCleared(_Event):
    pass


class KVEventBatch(_Batch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


_encoder = msgspec.msgpack.Encoder()


def _wire(event: ev.KVEvent) -> _Event:
    if isinstance(event, ev.BlockStored):
        return BlockStored(
            event.block_hashes,
            event.parent_block_hash,
            event.token_ids,
            event.block_size,
            event.lora_id,
            event.medium,
            event.lora_name,
        )
    if isinstance(event, ev.BlockRemoved):
        return BlockRemoved(event.block_hashes, event.medium)
    if isinstance(event, ev.AllBlocksCleared):
        return AllBlocksCleared()
    raise TypeError(f"not a KV event: {event!r}")


def encode_batch(ts: float, events: list[ev.KVEvent], data_parallel_rank: int | None = 0) -> bytes:
    """The payload frame of one batch: `ts` in seconds since the epoch, the events in order."""
    return _encoder.encode(KVEventBatch(ts, [_wire(e) for e in events], data_parallel_rank))


def decode_batch(payload: bytes) -> KVEventBatch:
    """A payload frame read back (tests and tools)."""
    return msgspec.msgpack.decode(payload, type=KVEventBatch)
