"""The bounded in-memory store of OpenAI Responses (`store: true`, OpenAI's default): what
`GET /v1/responses/{id}` returns and what `previous_response_id` continues from.

Each entry holds the response body and the whole conversation that led to it (the chat messages it was
generated from, without its `instructions`, then its own output), so that a continuation needs no other
entry. At most `max_entries` are kept (the oldest stored go first), holding at most `max_bytes` together
(an entry's size: its JSON, where data-URL images count; the oldest go first past it, and an entry larger
than the whole budget is not stored, which the log says), and none older than `max_age_s` seconds; a store
of 0 entries keeps nothing (`enabled` is False). It lives in the server process: a restart, or another
replica, does not know its ids.

Each entry records the tenant that stored it (`tgi.server.http.auth.tenant_of`): another tenant's `get` and
`delete` find nothing, as for an id never stored, so that a route answers both with the same 404.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("tgi.server")


@dataclass(frozen=True)
class StoredResponse:
    """One stored response."""

    body: dict  # the response object as `POST /v1/responses` returned it
    conversation: tuple[dict, ...]  # chat messages: its input (without `instructions`), then its output
    stored_at: float  # the store's clock when it was stored
    tenant: str | None = None  # who stored it (None: a server without inference keys)
    size: int = 0  # bytes it counts against the store's budget


class ResponsesStore:
    """Responses by id, bounded by count, bytes and age. Used from the event loop only (no lock)."""

    def __init__(
        self,
        max_entries: int,
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
        max_bytes: int = 64 * 2**20,
    ) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        if not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s}")
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self.num_bytes = 0  # the entries' sizes, summed

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def __len__(self) -> int:
        self._expire()
        return len(self._entries)

    def put(self, response_id: str, body: dict, conversation: list[dict], tenant: str | None = None) -> bool:
        """Keep `body` and `conversation` under `response_id` for `tenant`, dropping the oldest entries past
        the bounds. False, keeping nothing (and logging why), for an entry larger than `max_bytes`."""
        if not self.enabled:
            raise RuntimeError("the responses store keeps nothing (max_entries is 0)")
        self._expire()
        self._drop(response_id)
        size = len(json.dumps([body, conversation], separators=(",", ":"), default=str).encode())
        if size > self.max_bytes:
            log.warning(
                "response %s not stored: its %d bytes exceed --responses-store-max-bytes (%d)",
                response_id,
                size,
                self.max_bytes,
            )
            return False
        entry = StoredResponse(body, tuple(conversation), self._clock(), tenant, size)
        self._entries[response_id] = entry
        self.num_bytes += size
        while len(self._entries) > self.max_entries or self.num_bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def get(self, response_id: str, tenant: str | None = None) -> StoredResponse | None:
        """`tenant`'s entry, or None when it was never stored, was deleted, evicted, has expired, or is
        another tenant's."""
        self._expire()
        entry = self._entries.get(response_id)
        return entry if entry is not None and entry.tenant == tenant else None

    def delete(self, response_id: str, tenant: str | None = None) -> bool:
        """Drop `tenant`'s entry; False when there was none (or it had expired, or is another tenant's)."""
        if self.get(response_id, tenant) is None:
            return False
        return self._drop(response_id)

    def _drop(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is not None:
            self.num_bytes -= entry.size
        return entry is not None

    def _expire(self) -> None:
        """Drop the entries older than `max_age_s` (the oldest come first)."""
        oldest_kept = self._clock() - self.max_age_s
        while self._entries:
            response_id, first = next(iter(self._entries.items()))
            if first.stored_at > oldest_kept:
                return
            self._drop(response_id)
