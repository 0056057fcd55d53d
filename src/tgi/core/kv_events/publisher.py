"""The ZMQ transport of KV event batches, as vLLM's `ZmqEventPublisher` speaks it.

- PUB socket at `endpoint`: one message per batch, three frames: the topic (UTF-8, may be empty), the batch's
  sequence number (8 bytes, big-endian, from 0, one per batch, no gaps), the msgpack payload (`wire.py`).
- ROUTER socket at `replay_endpoint` (optional): a client sends the first sequence number it missed (8 bytes,
  big-endian) after an empty delimiter frame (what a REQ socket adds); it gets back, one message each, the
  delimiter and `(seq, payload)` for every batch still buffered from that number on (the last `buffer_steps`),
  then `(-1 as 8 signed bytes, b"")` to end. Several answers to one request: a DEALER client reads them all,
  a REQ one only the first.

Both sockets belong to one thread (ZMQ sockets are not thread-safe); `publish` only queues.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque

import zmq

from tgi.core.kv_events.events import KVEvent, KVEventsConfig
from tgi.core.kv_events.wire import encode_batch

log = logging.getLogger(__name__)

END_OF_REPLAY = (-1).to_bytes(8, "big", signed=True)


def _binds(endpoint: str) -> bool:
    """vLLM's rule: a wildcard host, an IPv6 `::` or a local transport binds; a plain address connects."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


class ZmqEventPublisher:
    """Publishes batches in order from its own thread; `close` sends what is queued, then stops."""

    def __init__(self, config: KVEventsConfig, data_parallel_rank: int = 0) -> None:
        self._config = config
        self._rank = data_parallel_rank
        self._queue: queue.Queue[tuple[float, list[KVEvent]] | None] = queue.Queue(config.max_queue_size)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._topic = config.topic.encode()
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._replay = None
        try:
            if _binds(config.endpoint):
                self._pub.bind(config.endpoint)
            else:
                self._pub.connect(config.endpoint)
            if config.replay_endpoint is not None:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.bind(config.replay_endpoint)
        except zmq.ZMQError as exc:
            self._close_sockets()
            raise OSError(f"--kv-events-config: cannot open {config.endpoint}: {exc}") from exc
        self.num_published = 0
        self._thread = threading.Thread(target=self._run, name="tgi-kv-events", daemon=True)
        self._thread.start()

    def publish(self, ts: float, events: list[KVEvent]) -> None:
        """Queue one batch (waits while `max_queue_size` batches are queued)."""
        self._queue.put((ts, events))

    def close(self, timeout: float = 5.0) -> None:
        """Publish what is queued, then close the sockets."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        seq = 0
        try:
            while True:
                if self._replay is not None and self._replay.poll(0):
                    self._answer_replay()
                try:
                    item = self._queue.get(timeout=0.05)
                except queue.Empty:
                    continue
                if item is None:
                    return
                payload = encode_batch(item[0], item[1], self._rank)
                self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
                self._buffer.append((seq, payload))
                seq += 1
                self.num_published = seq
        except Exception:
            log.exception("the KV event publisher stopped")
        finally:
            self._close_sockets()  # the PUB socket lingers a second for what it has not sent

    def _answer_replay(self) -> None:
        frames = self._replay.recv_multipart()
        if len(frames) != 3 or len(frames[2]) != 8:  # identity, empty delimiter, start
            log.warning(
                "KV event replay: ignored a request of %d frames (expected a start number)", len(frames)
            )
            return
        identity, start = frames[0], int.from_bytes(frames[2], "big")
        for seq, payload in self._buffer:
            if seq >= start:
                self._replay.send_multipart((identity, b"", seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((identity, b"", END_OF_REPLAY, b""))

    def _close_sockets(self) -> None:
        self._pub.close(linger=1000)
        if self._replay is not None:
            self._replay.close(linger=0)
        self._ctx.term()
