"""One admitted HTTP request (`RequestTracker`): its concurrency slots, the engine it is pinned to, and its
outcome in the metrics, counted once."""

from __future__ import annotations

import asyncio
import time
import weakref
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from tgi.server.http.errors import ApiError
from tgi.server.served_models.selection import selected
from tgi.server.service.protocol import ServingEngine

if TYPE_CHECKING:
    from tgi.server.service.inference import InferenceService


# The engine a request was admitted on: it tokenizes and generates there even when the served model is
# swapped meanwhile (`InferenceService.switch_engine`). Set by `admit()` in the request's own task.
# Weakly: a context outlives its request where the event loop keeps a cancelled timer of it until its time
# comes, and must not keep a swapped-out model alive meanwhile; the request's `RequestTracker` holds it.
PINNED_ENGINE: ContextVar[weakref.ref[ServingEngine] | None] = ContextVar("tgi_pinned_engine", default=None)


class RequestTracker:
    """One admitted HTTP request: holds its concurrency slots (one per engine sequence) until `finish()`
    and counts the outcome once."""

    def __init__(self, service: InferenceService, slots: int, metered: bool) -> None:
        self._service = service
        self._slots = slots
        self._metered = metered
        self._done = False
        self.started = time.perf_counter()
        chosen = selected()  # a server of several models: the one the request names
        self.engine = chosen.engine if chosen is not None else service.current_engine  # pinned to its end
        service.users[id(self.engine)] = service.users.get(id(self.engine), 0) + 1
        PINNED_ENGINE.set(weakref.ref(self.engine))

    def finish(self, exc: BaseException | None = None) -> None:
        if self._done:
            return
        self._done = True
        self._service.in_flight -= self._slots
        self._service.users[id(self.engine)] -= 1
        if not self._metered:
            return
        metrics = self._service.metrics
        if exc is None:
            metrics.request_succeeded(time.perf_counter() - self.started)
        elif isinstance(exc, ApiError):
            metrics.request_failed(exc.error_type)
        elif isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            metrics.request_failed("cancelled")
        else:
            metrics.request_failed("generation")

    def __enter__(self) -> RequestTracker:
        return self

    def __exit__(self, _type: Any, exc: BaseException | None, _tb: Any) -> None:
        self.finish(exc)
