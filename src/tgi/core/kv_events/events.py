"""The KV cache events, their recorder, and `--kv-events-config` (no dependency: neither msgspec nor zmq).

The events are vLLM's (`vllm/distributed/kv_events.py`), with its field names and order; the hashes in them are
ours: the block manager's SHA-256 chain (`tgi.core.block_hash`), 32 bytes each, not vLLM's. A consumer that
only compares the hashes it is sent (a router indexing events) works with them; one that computes vLLM's hashes
from token ids itself does not find ours (docs/deployment/router.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from tgi.core.config import ConfigError
from tgi.core.sequence import Sequence

#: vLLM's name of the tier the engine's own KV cache is on (its `MEDIUM_GPU`, whatever the device)
MEDIUM_GPU = "GPU"


@dataclass(frozen=True)
class BlockStored:
    """Full blocks entered in the prefix cache, in position order, each hash chained on the one before."""

    block_hashes: list[bytes]
    parent_block_hash: bytes | None  # the block before the first; None for a sequence's first block
    token_ids: list[int]  # the blocks' tokens: len(block_hashes) * block_size of them
    block_size: int
    lora_id: int | None  # the LoRA adapter's id (`lora_event_id`), None for the base model
    medium: str | None  # the cache tier: MEDIUM_GPU
    lora_name: str | None = None  # the LoRA adapter's name, None for the base model


@dataclass(frozen=True)
class BlockRemoved:
    """Blocks that left the prefix cache (evicted)."""

    block_hashes: list[bytes]
    medium: str | None


@dataclass(frozen=True)
class AllBlocksCleared:
    """The prefix cache was emptied (`POST /flush_cache`)."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


def lora_event_id(adapter_key: bytes) -> int:
    """The `lora_id` of an adapter's blocks: 63 bits of the SHA-256 of its prefix-cache key (adapters here are
    named, not numbered as vLLM's; a load of an adapter has its own key, so an adapter loaded again gets
    another id, as its blocks are never shared with the earlier load's)."""
    return int.from_bytes(hashlib.sha256(adapter_key).digest()[:8], "big") >> 1


class KVEventRecorder:
    """A `tgi.core.block_manager.CacheObserver` that keeps the block manager's changes as events until the
    engine takes them (`drain`, once per step). `lora_id_of(seq)`: the id of the LoRA adapter a sequence runs
    with, None for the base model (its name is the sequence's `params.adapter_id`)."""

    def __init__(self, block_size: int, lora_id_of: Callable[[Sequence], int | None]) -> None:
        self.block_size = block_size
        self._lora_id_of = lora_id_of
        self._events: list[KVEvent] = []

    def blocks_stored(
        self, seq: Sequence, block_hashes: list[bytes], parent_hash: bytes | None, token_ids: list[int]
    ) -> None:
        lora, name = self._lora_id_of(seq), seq.params.adapter_id
        size = self.block_size
        event = BlockStored(list(block_hashes), parent_hash, token_ids, size, lora, MEDIUM_GPU, name)
        self._events.append(event)

    def blocks_removed(self, block_hashes: list[bytes]) -> None:
        last = self._events[-1] if self._events else None
        if isinstance(last, BlockRemoved):  # evictions of one step in one event
            last.block_hashes.extend(block_hashes)
        else:
            self._events.append(BlockRemoved(list(block_hashes), MEDIUM_GPU))

    def cache_cleared(self) -> None:
        self._events.append(AllBlocksCleared())

    def drain(self) -> list[KVEvent]:
        """The events since the last drain, in the order they happened."""
        events, self._events = self._events, []
        return events


_ENDPOINT_SCHEMES = ("tcp://", "ipc://", "inproc://")


@dataclass(frozen=True)
class KVEventsConfig:
    """`--kv-events-config`: vLLM's `KVEventsConfig`, its keys and defaults. `publisher` "zmq" publishes on a
    ZMQ PUB socket at `endpoint` (bound when it holds `*` or `::` or is ipc:// or inproc://, else connected, as
    vLLM does), with a ROUTER socket at `replay_endpoint` (always bound) answering a start sequence number with
    the last `buffer_steps` batches; "null" records and drops them."""

    enable_kv_cache_events: bool = False
    publisher: str = "null"  # "zmq" when events are enabled and none is named
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000  # the PUB socket's high-water mark (messages queued per subscriber)
    max_queue_size: int = 100_000  # batches waiting for the publisher's thread; the engine waits beyond
    topic: str = ""

    @property
    def publishes(self) -> bool:
        return self.enable_kv_cache_events and self.publisher == "zmq"

    @classmethod
    def from_json(cls, text: str) -> KVEventsConfig:
        """Read the flag's JSON object; `ConfigError` naming the key for an unknown key or a wrong value."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--kv-events-config: not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ConfigError("--kv-events-config: expected a JSON object of vLLM's KVEventsConfig keys")
        known = {"enable_kv_cache_events", "publisher", "endpoint", "replay_endpoint"}
        known |= {"buffer_steps", "hwm", "max_queue_size", "topic"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(
                f"--kv-events-config: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        enabled = raw.get("enable_kv_cache_events", False)
        _expect(isinstance(enabled, bool), "enable_kv_cache_events", "true or false")
        publisher = raw.get("publisher")
        publisher = ("zmq" if enabled else "null") if publisher is None else publisher
        _expect(publisher in ("zmq", "null"), "publisher", '"zmq" or "null"')
        if publisher == "zmq" and not enabled:
            raise ConfigError(
                '--kv-events-config: publisher "zmq" publishes nothing without "enable_kv_cache_events": true'
            )
        for key in ("endpoint", "replay_endpoint"):
            value = raw.get(key)
            if value is None and key == "replay_endpoint":
                continue
            ok = isinstance(value, str) and value.startswith(_ENDPOINT_SCHEMES) if key in raw else True
            _expect(ok, key, "a ZMQ endpoint: tcp://host:port, ipc://path or inproc://name")
        for key, least in (("buffer_steps", 1), ("hwm", 0), ("max_queue_size", 1)):
            if key in raw:
                value = raw[key]
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= least
                _expect(ok, key, f"an integer >= {least}")
        _expect(isinstance(raw.get("topic", ""), str), "topic", "a string")
        return cls(**{**raw, "publisher": publisher})


def _expect(ok: bool, key: str, what: str) -> None:
    if not ok:
        raise ConfigError(f"--kv-events-config: {key} must be {what}")
