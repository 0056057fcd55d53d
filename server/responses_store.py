"""The bounded in-memory store of OpenAI Responses (`store: true`, OpenAI's default): what
`GET /v1/responses/{id}` returns and what `previous_response_id` continues from.

Each entry holds the response body and the whole conversation that led to it (the chat messages it was
generated from, without its `instructions`, then its own output), so that a continuation needs no other
entry. At most `max_entries` are kept (the oldest stored go first) and none older than `max_age_s`
seconds; a store of 0 entries keeps nothing (`enabled` is False). It lives in the server process: a
restart, or another replica, does not know its ids.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class StoredResponse:
    """One stored response."""

    body: dict  # the response object as `POST /v1/responses` returned it
    conversation: tuple[dict, ...]  # chat messages: its input (without `instructions`), then its output
    stored_at: float  # the store's clock when it was stored


class ResponsesStore:
    """Responses by id, bounded by count and age. Used from the event loop only (no lock)."""

    def __init__(
        self, max_entries: int, max_age_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        if not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s}")
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self._clock = clock
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def __len__(self) -> int:
        self._expire()
        return len(self._entries)

    def put(self, response_id: str, body: dict, conversation: list[dict]) -> None:
        """Keep `body` and `conversation` under `response_id`, dropping the oldest entries past the bound."""
        if not self.enabled:
            raise RuntimeError("the responses store keeps nothing (max_entries is 0)")
        self._expire()
        self._entries.pop(response_id, None)
        self._entries[response_id] = StoredResponse(body, tuple(conversation), self._clock())
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        """The entry, or None when it was never stored, was deleted, evicted or has expired."""
        self._expire()
        return self._entries.get(response_id)

    def delete(self, response_id: str) -> bool:
        """Drop the entry; False when there was none (or it had expired)."""
        self._expire()
        return self._entries.pop(response_id, None) is not None

    def _expire(self) -> None:
        """Drop the entries older than `max_age_s` (the oldest come first)."""
        oldest_kept = self._clock() - self.max_age_s
        while self._entries:
            first = next(iter(self._entries.values()))
            if first.stored_at > oldest_kept:
                return
            self._entries.popitem(last=False)
