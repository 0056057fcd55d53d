"""Raw ASGI calls for tests that need what a test client hides: a client that disconnects at a chosen
moment, a body that is never read."""

from __future__ import annotations

import asyncio


def http_scope(path: str, spec: str = "2.4", headers: tuple[tuple[bytes, bytes], ...] = ()) -> dict:
    """The scope of a JSON `POST path` under ASGI spec version `spec` (disconnects are told differently
    before and after 2.4), with `headers` added."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"host", b"t"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("t", 80),
    }


def disconnect_after(body: bytes, seconds: float):
    """An ASGI `receive` that hands over `body`, then says the client left `seconds` later."""
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(seconds)
        return {"type": "http.disconnect"}

    return receive


async def ignore(_message: dict) -> None:
    """An ASGI `send` for a client that reads nothing."""
