"""Errors in Anthropic's shape on the Messages API's routes (`/v1/messages`, `/v1/messages/count_tokens`).

Anthropic answers `{"type": "error", "error": {"type", "message"}, "request_id"}` with its own statuses: an
invalid request is a 400 `invalid_request_error` (where the other routes answer 422), and an API short of
capacity a 529 `overloaded_error`. A server at `--max-concurrent-requests` (a 429 on the other routes) or
whose grammar compiler is busy (503) is short of capacity for every client, which is what Anthropic's 529
says (its 429 `rate_limit_error` is one account's own rate limit, which this server has none of): both are
answered with 529 here. The SDKs retry a 529 as they retry a 429.
"""

from __future__ import annotations

import uuid

from tgi.server.http.errors import ErrorDialect

# our status -> (Anthropic's status, Anthropic's `error.type`)
_ANTHROPIC = {
    400: (400, "invalid_request_error"),
    401: (401, "authentication_error"),
    403: (403, "permission_error"),
    404: (404, "not_found_error"),
    413: (413, "request_too_large"),
    422: (400, "invalid_request_error"),
    429: (529, "overloaded_error"),
    503: (529, "overloaded_error"),
}


def is_anthropic_path(path: str) -> bool:
    """Whether a route answers in Anthropic's shapes (a trailing or repeated slash changes nothing)."""
    normal = "/" + "/".join(part for part in path.split("/") if part)
    return normal == "/v1/messages" or normal.startswith("/v1/messages/")


def anthropic_status(status: int) -> int:
    """The status Anthropic answers where the other routes answer `status`."""
    return _ANTHROPIC.get(status, (status, ""))[0]


def anthropic_error_type(status: int) -> str:
    """Anthropic's `error.type` for our `status`: its own name where it has one, `invalid_request_error`
    for another 4xx (as Anthropic does), `api_error` for a 5xx."""
    if status in _ANTHROPIC:
        return _ANTHROPIC[status][1]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def anthropic_body(status: int, message: str, param: str | None = None) -> dict:
    """The error body Anthropic sends (in a response, or as the data of a stream's `error` event). Its
    body has no `param`: the message names the request field at fault (`param`) where it does not already."""
    if param is not None and param not in message:
        message = f"{message} (at `{param}`)"
    return {
        "type": "error",
        "error": {"type": anthropic_error_type(status), "message": message},
        "request_id": f"req_{uuid.uuid4().hex}",
    }


# Registered by `create_app` with the Messages routes, so that every error on those paths, whoever raises it
# (the key check, the payload limit, a stream's tail), is worded in Anthropic's shape.
ANTHROPIC_ERRORS = ErrorDialect(is_anthropic_path, anthropic_status, anthropic_body, stream_event="error")
