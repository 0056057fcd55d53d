"""Errors in OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`) on vLLM's scoring routes
outside `/v1` (`/v2/rerank`, `/score`, `/classify`), as vLLM answers them; `/v1/*` has it already."""

from __future__ import annotations

from tgi.server.http.errors import ApiError, ErrorDialect

#: vLLM's scoring paths outside `/v1`
PATHS = ("/v2/rerank", "/score", "/classify")


def is_vllm_path(path: str) -> bool:
    return path.rstrip("/") in PATHS


def openai_body(status: int, message: str, param: str | None = None) -> dict:
    return ApiError(status, message, "validation", param).openai_body()


# Registered by `create_app` with the vLLM routes
VLLM_ERRORS = ErrorDialect(is_vllm_path, lambda status: status, openai_body)
