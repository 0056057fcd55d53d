"""Error bodies for every failure, malformed JSON included: TGI's (`{"error": ..., "error_type": ...}`) on
TGI's routes, OpenAI's (`{"error": {"message", "type", "param", "code"}}`) on `/v1/*`, and an API's own
where its package registers an `ErrorDialect` for its paths (Anthropic's Messages API:
`tgi.server.anthropic.errors`, with Anthropic's statuses). This package imports no API's package."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("tgi.server")

# OpenAI's `error.type` and `error.code` for each status we answer with (OpenAI's own names)
_OPENAI_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    413: ("invalid_request_error", "payload_too_large"),
    422: ("invalid_request_error", None),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorResponse(BaseModel):
    """The error body of the routes under `/v1` (OpenAI's shape), for their OpenAPI description."""

    error: OpenAIErrorDetail


@dataclass(frozen=True)
class ErrorDialect:
    """How the routes at some paths word an error: `matches(path)` says which paths; `status(ours)` is the
    status they answer where TGI's routes answer `ours`; `body(status, message, param)` their body (with our
    status); `stream_event`, the name of a stream's error event (None: a `data:` line, as TGI and OpenAI)."""

    matches: Callable[[str], bool]
    status: Callable[[int], int]
    body: Callable[[int, str, str | None], dict]
    stream_event: str | None = None


_DIALECTS: list[ErrorDialect] = []


def register_dialect(dialect: ErrorDialect) -> None:
    """Make `dialect` the error shape of the paths it matches (an API's package does, once, when imported)."""
    if dialect not in _DIALECTS:
        _DIALECTS.append(dialect)


def dialect_for(path: str) -> ErrorDialect | None:
    """The registered dialect of the route at `path`; None for TGI's and OpenAI's shapes."""
    return next((d for d in _DIALECTS if d.matches(path)), None)


def is_openai_path(path: str) -> bool:
    """Whether a route answers in OpenAI's shapes."""
    return path.startswith("/v1/")


class ApiError(Exception):
    """An error answered with TGI's body (OpenAI's on `/v1`); `error_type` is also the `err` label of
    `tgi_request_failure`; `param` names the request field at fault, where one is."""

    def __init__(
        self, status: int, message: str, error_type: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param
        self.code = code

    def body(self) -> dict:
        return {"error": self.message, "error_type": self.error_type}

    def openai_body(self) -> dict:
        kind, code = _OPENAI_TYPES.get(self.status, ("server_error", None))
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": self.code or code}
        }

    def body_for(self, path: str) -> dict:
        dialect = dialect_for(path)
        if dialect is not None:
            return dialect.body(self.status, self.message, self.param)
        return self.openai_body() if is_openai_path(path) else self.body()

    def status_for(self, path: str) -> int:
        """The status the route at `path` answers this error with (a dialect's may differ: Anthropic's 422
        is a 400)."""
        dialect = dialect_for(path)
        return dialect.status(self.status) if dialect is not None else self.status

    def response(self, path: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(self.body_for(path), status_code=self.status_for(path), headers=headers)


def validation_error(message: str, param: str | None = None) -> ApiError:
    """A 422 with TGI's prefix (TGI's `InferError::ValidationError` display)."""
    return ApiError(422, f"Input validation error: {message}", "validation", param=param)


def unsupported(name: str, why: str = "is not supported by this server") -> ApiError:
    """A 422 that refuses a known request field by name (never accepted and ignored)."""
    return validation_error(f"`{name}` {why}", param=name)


def overloaded() -> ApiError:
    return ApiError(429, "Model is overloaded", "overloaded")


def escaped(text: str) -> str:
    """`text` with control characters, quotes and backslashes escaped as `repr` writes them: what a log line
    quotes from a client or a peer (a field name, a URL, an exception's text) cannot forge another line."""
    return repr(text)[1:-1]


def internal_error(exc: BaseException, error_type: str = "generation") -> ApiError:
    """A 500 whose body names a request id and nothing of the exception; the log has the details."""
    request_id = uuid.uuid4().hex[:16]
    log.error("request %s failed: %s: %s", request_id, type(exc).__name__, escaped(str(exc)), exc_info=exc)
    return ApiError(500, f"Internal server error (request id {request_id}; see the server log)", error_type)


def logged_refusal(
    status: int, message: str, exc: BaseException, error_type: str, param: str | None = None
) -> ApiError:
    """A `status` answer whose body is `message` and a request id, nothing of `exc` (it may name paths or
    file contents); the log has `exc` under that id."""
    request_id = uuid.uuid4().hex[:16]
    log.warning("request %s refused (%d): %s: %s", request_id, status, type(exc).__name__, escaped(str(exc)))
    return ApiError(
        status, f"{message} (see the server log, request id {request_id})", error_type, param=param
    )


def _describe(errors: list) -> str:
    """One line from pydantic's errors, e.g. "parameters.temperature: Input should be a valid number"."""
    parts = []
    for e in errors[:3]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
        msg = e.get("msg", "invalid")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts) or "invalid request"


def _first_param(errors: list) -> str | None:
    """The field of the first error, e.g. "messages" (OpenAI's `param`); None when it names none."""
    loc = [str(p) for p in errors[0].get("loc", ()) if p != "body"] if errors else []
    return ".".join(loc) or None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response(request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Malformed JSON and wrong types: 422 with our body, never FastAPI's `detail`.
        errors = exc.errors()
        return validation_error(_describe(errors), _first_param(errors)).response(request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "payload_too_large" if exc.status_code == 413 else "http"
        err = ApiError(exc.status_code, str(exc.detail), kind)
        return err.response(request.url.path, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return internal_error(exc).response(request.url.path)
