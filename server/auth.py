"""`--api-key`: every route but /health needs `Authorization: Bearer <key>` (a pure ASGI middleware, so that
streamed responses and disconnects pass through untouched)."""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = frozenset({"/health"})


class BearerAuth:
    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": "Unauthorized", "error_type": "unauthorized"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _allowed(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                return hmac.compare_digest(value.strip(), self._expected)
        return False
