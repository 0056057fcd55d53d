"""Many HTTP requests at once against a real server, for tests that check concurrent answers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx


def post_concurrently(url: str, bodies: list[dict], timeout: float = 120) -> list[httpx.Response]:
    """POST each of `bodies` to `url` at once (one thread each, one shared client); the responses in order."""
    with httpx.Client(timeout=timeout) as http, ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: http.post(url, json=body), bodies))
