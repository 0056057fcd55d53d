"""`--payload-limit`: a request body over the limit is a 413 before it is read in full (a pure ASGI
middleware, so that streamed responses and disconnects pass through untouched)."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tgi.server.http.errors import ApiError


def too_large(limit: int) -> str:
    return f"Payload too large: the request body is over --payload-limit ({limit} bytes)"


class PayloadLimit:
    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:  # refused before a byte of the body is read
            response = ApiError(413, too_large(self.limit), "payload_too_large").response(scope["path"])
            await response(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            # a chunked body (no Content-Length) is counted as it arrives and refused past the limit
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise HTTPException(413, too_large(self.limit))
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
