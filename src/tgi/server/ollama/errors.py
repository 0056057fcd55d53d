"""Errors in Ollama's shape on its routes (`/api/*`): `{"error": "<message>"}`, with Ollama's statuses.

Ollama answers an invalid request with a 400 (where TGI's routes answer 422), an unknown model with a 404, and
a server whose queue is full with a 503 (`server busy`): our 429 (`--max-concurrent-requests`) is answered
503 here, as is our 503 (the grammar compiler busy). An error once a stream has started is its last line,
`{"error": "<message>"}` (the routes pass `ndjson_error` to `Generation.body`), which Ollama's clients raise.
"""

from __future__ import annotations

import json

from tgi.server.http.errors import ApiError, ErrorDialect

# our status -> Ollama's
_OLLAMA = {422: 400, 429: 503}


def is_ollama_path(path: str) -> bool:
    """Whether a route answers in Ollama's shapes (a trailing or repeated slash changes nothing)."""
    normal = "/" + "/".join(part for part in path.split("/") if part)
    return normal.startswith("/api/")


def ollama_status(status: int) -> int:
    """The status Ollama answers where the other routes answer `status`."""
    return _OLLAMA.get(status, status)


def ollama_body(status: int, message: str, param: str | None = None) -> dict:
    """Ollama's error body: the message alone, naming the request field at fault (`param`) where it does
    not already."""
    if param is not None and param not in message:
        message = f"{message} (at `{param}`)"
    return {"error": message}


def ndjson_error(exc: ApiError) -> bytes:
    """An error after the headers: the stream's last line."""
    return ndjson(ollama_body(exc.status, exc.message, exc.param))


def ndjson(payload: dict) -> bytes:
    """One line of an NDJSON stream."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


# Registered by `create_app` with the Ollama routes, so that every error on `/api/*`, whoever raises it (the
# key check, the payload limit, a malformed body), is worded in Ollama's shape.
OLLAMA_ERRORS = ErrorDialect(is_ollama_path, ollama_status, ollama_body)
