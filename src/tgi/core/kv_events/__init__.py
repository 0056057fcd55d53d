"""KV cache events in vLLM's format and transport, so that a router can see what each replica has cached.

`events.py` (no dependency): the events (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`), the
`KVEventRecorder` that the block manager tells of each change of its prefix-cache index, and `KVEventsConfig`
(`--kv-events-config`, vLLM's JSON keys). `wire.py` (msgspec): a step's events as vLLM's `KVEventBatch`,
msgpack-encoded as vLLM encodes it. `publisher.py` (pyzmq): the PUB socket and its replay socket. The engine
drives them (`KVEventStream`, `stream.py`): after each step it hands the recorder's events to the publisher.
msgspec and pyzmq are the `events` extra's; only an engine started with events on imports them.
"""

from tgi.core.kv_events.events import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
    KVEventRecorder,
    KVEventsConfig,
)

__all__ = [
    "MEDIUM_GPU",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "KVEvent",
    "KVEventRecorder",
    "KVEventsConfig",
]
