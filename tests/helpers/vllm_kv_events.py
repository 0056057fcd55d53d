"""A subscriber of KV cache events written from vLLM's definitions (`vllm/distributed/kv_events.py`), not from
ours: its structs are declared here as vLLM declares its own (the batch array-like, each event a map tagged by
its class name under "type", block hashes bytes or int), so a test decoding our payloads with them checks the
wire against vLLM's layout.

`Subscriber` speaks vLLM's transport: SUB on the topic, frames (topic, 8-byte big-endian sequence number,
payload); replay over a DEALER socket: send (empty delimiter, the first sequence number wanted), read
(delimiter, seq, payload) until seq -1.
"""

from __future__ import annotations

import time

import msgspec
import zmq

ExternalBlockHash = bytes | int


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


_decoder = msgspec.msgpack.Decoder(KVEventBatch)


def decode(payload: bytes) -> KVEventBatch:
    return _decoder.decode(payload)


class Subscriber:
    """SUB socket connected to `endpoint` for `topic`; `replay_endpoint` for `replay`."""

    def __init__(self, endpoint: str, topic: str = "", replay_endpoint: str | None = None) -> None:
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self.sub.connect(endpoint)
        self.topic = topic.encode()
        self.replay_endpoint = replay_endpoint

    def receive(self, timeout_s: float = 30.0) -> tuple[int, KVEventBatch] | None:
        """The next batch (its sequence number and contents), or None when none comes within `timeout_s`."""
        if not self.sub.poll(int(timeout_s * 1000)):
            return None
        topic, seq, payload = self.sub.recv_multipart()
        assert topic == self.topic
        assert len(seq) == 8
        return int.from_bytes(seq, "big"), decode(payload)

    def receive_until(self, done, timeout_s: float = 60.0) -> list[tuple[int, KVEventBatch]]:
        """Batches until `done(batches)` holds; fails past `timeout_s` (a liveness bound, not a measure)."""
        batches: list[tuple[int, KVEventBatch]] = []
        deadline = time.monotonic() + timeout_s
        while not done(batches):
            assert time.monotonic() < deadline, f"no end after {timeout_s} s: {batches}"
            got = self.receive(max(deadline - time.monotonic(), 0.001))
            if got is not None:
                batches.append(got)
        return batches

    def replay(self, start: int, timeout_s: float = 30.0) -> list[tuple[int, KVEventBatch]]:
        """The publisher's buffered batches from `start` on, through its replay socket."""
        req = self.ctx.socket(zmq.DEALER)  # a REQ socket would read only the first of the answers
        req.connect(self.replay_endpoint)
        try:
            req.send_multipart((b"", start.to_bytes(8, "big")))  # the empty delimiter REQ would add
            batches = []
            while True:
                assert req.poll(int(timeout_s * 1000)), "the replay socket did not answer"
                _, seq, payload = req.recv_multipart()
                number = int.from_bytes(seq, "big", signed=True)
                if number == -1:
                    return batches
                batches.append((number, decode(payload)))
        finally:
            req.close(linger=0)

    def close(self) -> None:
        self.sub.close(linger=0)
        self.ctx.term()
