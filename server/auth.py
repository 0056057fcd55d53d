"""`--api-key`: every route but /health and /ping needs `Authorization: Bearer <key>` (a pure ASGI middleware, so that
streamed responses and disconnects pass through untouched)."""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from tgi.server.errors import ApiError

OPEN_PATHS = frozenset({"/health", "/ping"})  # health checks (`/ping`: SageMaker's)


class BearerAuth:
    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        error = ApiError(401, "Unauthorized", "unauthorized")
        await error.response(scope["path"], headers={"www-authenticate": "Bearer"})(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                return hmac.compare_digest(value.strip(), self._expected)
        return False
