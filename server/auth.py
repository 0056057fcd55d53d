"""The key check, per route class (a pure ASGI middleware, so that streamed responses and disconnects pass
through untouched; keys compared in constant time):

- open: `/health`, `/ping` (health checks) need no key;
- operator: `/admin/*`, `/v1/load_lora_adapter`, `/v1/unload_lora_adapter` accept only the admin key
  (`--admin-api-key`), never the inference key; a server without an admin key lets them through to the route,
  which refuses them (403 naming the flag), behind the inference key when there is one;
- inference: every other route needs the inference key (`--api-key`) when there is one; the admin key does
  not open them (an operator who wants both holds both keys).

A key is presented as `Authorization: Bearer <key>` or, as Anthropic's clients send it, `x-api-key: <key>`
(either header, on every route class). A refusal is a 401 with `www-authenticate: Bearer`, in the route's
error shape."""

from __future__ import annotations

import hmac
from enum import Enum

from starlette.types import ASGIApp, Receive, Scope, Send

from tgi.server.errors import ApiError

OPEN_PATHS = frozenset({"/health", "/ping"})  # health checks (`/ping`: SageMaker's)
OPERATOR_PATHS = frozenset({"/v1/load_lora_adapter", "/v1/unload_lora_adapter"})  # and /admin/*


class RouteClass(Enum):
    OPEN = "open"
    OPERATOR = "operator"
    INFERENCE = "inference"


def route_class(path: str) -> RouteClass:
    """The class of the route at `path` (a trailing slash or a repeated one changes nothing)."""
    normal = "/" + "/".join(part for part in path.split("/") if part)
    if normal in OPEN_PATHS:
        return RouteClass.OPEN
    if normal in OPERATOR_PATHS or normal == "/admin" or normal.startswith("/admin/"):
        return RouteClass.OPERATOR
    return RouteClass.INFERENCE


class BearerAuth:
    """Checks `Authorization: Bearer <key>` (or `x-api-key: <key>`) against the key of the route's class
    (module docstring)."""

    def __init__(self, app: ASGIApp, api_key: str | None = None, admin_api_key: str | None = None) -> None:
        self.app = app
        inference = None if api_key is None else f"Bearer {api_key}".encode()
        admin = None if admin_api_key is None else f"Bearer {admin_api_key}".encode()
        self._expected = {
            RouteClass.OPEN: None,
            RouteClass.INFERENCE: inference,
            RouteClass.OPERATOR: admin if admin is not None else inference,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        expected = self._expected[route_class(scope["path"])]
        if expected is None or _presented(scope, expected):
            await self.app(scope, receive, send)
            return
        error = ApiError(401, "Unauthorized", "unauthorized")
        await error.response(scope["path"], headers={"www-authenticate": "Bearer"})(scope, receive, send)


def _presented(scope: Scope, expected: bytes) -> bool:
    """Whether the first `authorization` header (`Bearer <key>`) or the first `x-api-key` header (`<key>`)
    presents the key of `expected` (`Bearer <key>`)."""
    presented: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", ()):
        if name in (b"authorization", b"x-api-key") and name not in presented:
            presented[name] = value.strip() if name == b"authorization" else b"Bearer " + value.strip()
    # both compared, whatever the first gives: the time taken tells nothing of which one matched
    matches = [hmac.compare_digest(value, expected) for value in presented.values()]
    return any(matches)
