"""The helpers that tie a request's engine streams to its response: closing a merge closes its streams."""

from __future__ import annotations

import pytest

from tgi.server.http import sse


@pytest.mark.parametrize("n", [1, 3])
async def test_closing_a_merge_early_closes_every_stream_at_once(n):
    closed: list[int] = []

    async def stream(i: int):
        try:
            for k in range(100):
                yield k
        finally:
            closed.append(i)  # the engine's stream is closed here: its request is cancelled

    merged = sse.merge([stream(i) for i in range(n)])
    first, merged = await sse.peek(merged)
    assert first is not None and first[1] == 0
    await merged.aclose()  # the client went away
    assert sorted(closed) == list(range(n))
