"""TGI's error body (`{"error": ..., "error_type": ...}`) for every failure, malformed JSON included."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("tgi.server")


class ApiError(Exception):
    """An error answered with TGI's body; `error_type` is also the `err` label of `tgi_request_failure`."""

    def __init__(self, status: int, message: str, error_type: str):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type

    def body(self) -> dict:
        return {"error": self.message, "error_type": self.error_type}


def validation_error(message: str) -> ApiError:
    """A 422 with TGI's prefix (TGI's `InferError::ValidationError` display)."""
    return ApiError(422, f"Input validation error: {message}", "validation")


def overloaded() -> ApiError:
    return ApiError(429, "Model is overloaded", "overloaded")


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


def _describe(errors: list) -> str:
    """One line from pydantic's errors, e.g. "parameters.temperature: Input should be a valid number"."""
    parts = []
    for e in errors[:3]:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
        msg = e.get("msg", "invalid")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # Malformed JSON and wrong types: TGI answers 422 with its body, never FastAPI's `detail`.
        return JSONResponse(
            {"error": f"Input validation error: {_describe(exc.errors())}", "error_type": "validation"},
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            {"error": str(exc.detail), "error_type": "http"}, status_code=exc.status_code, headers=exc.headers
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(
            {"error": str(exc) or type(exc).__name__, "error_type": "generation"}, status_code=500
        )
