"""Which model a request uses on a server of several (`ModelPool`): read once, before its route runs.

`ModelSelection` is a pure ASGI middleware (streams and disconnects pass through untouched). For a request
to a route that reads a model, it reads the body (already bounded by `--payload-limit`), takes the model
its JSON `model` field names (OpenAI's, Anthropic's, Ollama's, vLLM's routes; TGI's and TEI's name none:
the default), loads it when it is not loaded (the request waits), and holds it until the response has been
sent; the route then finds that model's engine as `InferenceService.engine`, as on a server of one. A
`model` that names no served model but a LoRA adapter of the default goes to the default, whose routes
resolve the adapter as they always do (so does `tgi`, TGI's name for the served model); any other name is a
404 in the route's own error shape, listing what is served. Ollama's `keep_alive` becomes the model's
keep-alive once the response is sent.

The routes that list models or read no model never load one: `ENGINE_FREE`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tgi.server.flags.parsers import duration_value
from tgi.server.http.errors import ApiError
from tgi.server.lora.adapters import BASE_ALIAS
from tgi.server.served_models.pool import ModelPool, PooledModel

#: routes that read no model (health, metrics, the lists of models, the docs, the admin routes)
ENGINE_FREE = frozenset(
    {
        "/health",
        "/ping",
        "/metrics",
        "/v1/models",
        "/api/tags",
        "/api/ps",
        "/api/version",
        "/docs",
        "/docs/oauth2-redirect",
        "/openapi.json",
        "/redoc",
    }
)


@dataclass
class Selection:
    """The model a request uses, and its engine (loaded, and held until the response is sent)."""

    entry: PooledModel
    engine: Any


_SELECTED: ContextVar[Selection | None] = ContextVar("tgi_selected_model", default=None)


def selected() -> Selection | None:
    """The current request's model on a server of several; None elsewhere (or on an `ENGINE_FREE` route)."""
    return _SELECTED.get()


@contextlib.contextmanager
def reading(entry: PooledModel) -> Iterator[None]:
    """Within it, `InferenceService.engine` and `model_name` are loaded model `entry`'s: what the routes that
    list the models read of each. It holds no lease: a model unloaded meanwhile is read as it was."""
    token = _SELECTED.set(Selection(entry, entry.engine))
    try:
        yield
    finally:
        _SELECTED.reset(token)


class ModelSelection:
    def __init__(self, app: ASGIApp, pool: ModelPool) -> None:
        self.app = app
        self.pool = pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in ENGINE_FREE or path.startswith("/admin/"):
            await self.app(scope, receive, send)
            return
        try:
            body = await _read_body(receive)
        except HTTPException as exc:  # past --payload-limit, counted as it arrived
            await ApiError(exc.status_code, str(exc.detail), "payload_too_large").response(path)(
                scope, receive, send
            )
            return
        fields = _fields(body)
        try:
            entry = self._entry(fields.get("model"))
            engine = await self.pool.acquire(entry)
        except ApiError as exc:
            await exc.response(path)(scope, receive, send)
            return
        token = _SELECTED.set(Selection(entry, engine))
        try:
            await self.app(scope, _replayed(body, receive), send)
            if path.startswith("/api/"):
                _take_keep_alive(entry, fields.get("keep_alive"))
        finally:
            _SELECTED.reset(token)
            self.pool.release(entry)

    def _entry(self, model: Any) -> PooledModel:
        name = model if isinstance(model, str) else None
        entry = self.pool.resolve(name)
        if entry is not None:
            return entry
        default = self.pool.models[self.pool.default]
        if name == BASE_ALIAS:  # TGI's name for "the served model", as on a server of one
            return default
        if default.engine is not None:  # a LoRA adapter of the default model? (loaded at launch or since)
            adapters = tuple(default.engine.model_info.lora_adapters)
        else:  # not loaded: those it loads at start, without loading it to find out
            adapters = tuple(name for name, _ in default.config.lora_adapters)
        if name in adapters or name.removesuffix(":latest") in adapters:
            return default
        served = ", ".join(f"`{n}`" for n in (*self.pool.models, *adapters))
        raise ApiError(
            404,
            f"The model `{name}` does not exist: this server serves {served}",
            "model_not_found",
            param="model",
            code="model_not_found",
        )


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replayed(body: bytes, receive: Receive) -> Receive:
    """`receive` for the route: the body read above, then the client's own messages (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _fields(body: bytes) -> dict:
    """The JSON object's fields (empty for any other body: the route answers it)."""
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _take_keep_alive(entry: PooledModel, value: Any) -> None:
    """Ollama's `keep_alive` (seconds; negative: kept loaded) as `entry`'s keep-alive from now on; none, or a
    malformed one (refused by the route: `tgi.server.ollama.inputs.keep_alive_seconds`), changes nothing."""
    try:
        seconds = duration_value(value)
    except ValueError:
        return
    if seconds is not None:
        entry.keep_alive_s = seconds
