"""Server-Sent Events framing, and helpers that tie a request's streams to its client connection."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from tgi.server.http.errors import ApiError, dialect_for

T = TypeVar("T")
log = logging.getLogger(__name__)


def event(payload: Any) -> bytes:
    """One SSE event: `data: {json}\\n\\n`."""
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def named_event(name: str, payload: Any) -> bytes:
    """One SSE event with its name (`event: {name}`), as Anthropic's streams send every event."""
    return f"event: {name}\n".encode() + event(payload)


DONE = b"data: [DONE]\n\n"


class SlowReaderError(TimeoutError):
    """A client did not take an event within the write deadline (it stopped reading)."""


class EventStreamResponse(StreamingResponse):
    """A streaming response that always closes its iterator when the response ends, however it ends.

    Starlette cancels the body task when the client disconnects (ASGI spec < 2.4) or fails the next `send`
    (spec >= 2.4); either way the `finally` of our generators runs now, not at garbage collection, so the
    engine's stream is closed and the request cancelled within one engine step.

    A send that does not complete within `write_timeout` seconds (a client that stopped reading: the
    server's write buffer stays full) ends the response the same way, so that a stalled reader never keeps
    its concurrency slot and KV blocks.
    """

    def __init__(
        self, content: AsyncIterator[bytes], write_timeout: float, headers: dict[str, str] | None = None
    ) -> None:
        if not write_timeout > 0:
            raise ValueError(f"write_timeout must be > 0 seconds, got {write_timeout}")
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
        )
        self._content = content
        self.write_timeout = write_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stalled = False

        async def send_before_deadline(message: Message) -> None:
            nonlocal stalled
            try:
                await asyncio.wait_for(send(message), self.write_timeout)
            except TimeoutError:
                stalled = True
                raise SlowReaderError(f"the client took no data for {self.write_timeout:g} s") from None

        try:
            await super().__call__(scope, receive, send_before_deadline)
        except (ClientDisconnect, OSError):
            if stalled:  # starlette reports it as a disconnect
                client = scope.get("client")
                log.warning(
                    "stream to %s cancelled: the client read nothing for %g s (--stream-write-timeout)",
                    f"{client[0]}:{client[1]}" if client else "a client",
                    self.write_timeout,
                )
            # else the client went away; either way the stream is closed below
        finally:
            aclose = getattr(self._content, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


class Tracker(Protocol):
    """What `with_error_tail` needs of a request's tracker (`tgi.server.service.request_tracker.RequestTracker`)."""

    def finish(self, exc: BaseException | None = None) -> None: ...


def error_event(exc: ApiError, path: str) -> bytes:
    """An error after the headers, as the last event of a stream at `path` that has no event of its own for
    it: the named event of the route's error dialect where it names one (Anthropic's `error`), else a
    `data:` line with the error body of the route's API (TGI's body, OpenAI's on `/v1`)."""
    body = exc.body_for(path)
    dialect = dialect_for(path)
    return named_event(dialect.stream_event, body) if dialect and dialect.stream_event else event(body)


async def with_error_tail(
    chunks: AsyncIterator[bytes],
    stream: AsyncIterator[Any],
    tracker: Tracker,
    path: str,
    failed: Callable[[ApiError], bytes] | None = None,
) -> AsyncIterator[bytes]:
    """The body of a streamed response: `chunks` (the route's events from the engine's `stream`), then,
    if an `ApiError` comes once the headers are sent, that error as the last event: `failed(error)` where
    the route's stream has its own event for it (OpenAI Responses' `response.failed`), else
    `error_event`. However it ends (done, failed, client gone), the engine's stream is closed (a request
    still running is cancelled) and `tracker` finishes once, with the error if there was one."""
    try:
        async for chunk in chunks:
            yield chunk
    except ApiError as exc:
        tracker.finish(exc)
        yield (failed or (lambda e: error_event(e, path)))(exc)
    except BaseException as exc:
        tracker.finish(exc)
        raise
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
        await stream.aclose()
        tracker.finish()


async def peek(stream: AsyncIterator[T]) -> tuple[T | None, AsyncIterator[T]]:
    """Wait for the first item (so that errors before any token still get their HTTP status)."""
    try:
        first = await stream.__anext__()
    except StopAsyncIteration:
        return None, stream
    return first, stream


async def merge(streams: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Items of several streams as they come, tagged with the stream's index; closing it closes them all."""
    if len(streams) == 1:
        try:
            async for item in streams[0]:
                yield 0, item
        finally:  # closed early (client gone): close the stream now, not when it is collected
            await streams[0].aclose()
        return
    queue: asyncio.Queue = asyncio.Queue()
    finished = object()

    async def pump(i: int, stream: AsyncIterator[T]) -> None:
        try:
            async for item in stream:
                await queue.put((i, item, None))
        except BaseException as exc:
            await queue.put((i, finished, exc))
            raise
        await queue.put((i, finished, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(tasks)
        while remaining:
            i, item, exc = await queue.get()
            if item is finished:
                if exc is not None and not isinstance(exc, asyncio.CancelledError):
                    raise exc
                remaining -= 1
                continue
            yield i, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def gather_or_cancel(works: list[Awaitable[T]]) -> list[T]:
    """The results of `works`, in order; the first failure cancels the others (and waits for them, so that
    their engine streams are closed) before it is raised. A cancellation of this cancels them all."""
    tasks = [asyncio.ensure_future(w) for w in works]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
    return [task.result() for task in tasks]


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client goes away first (a non-streamed request)."""
    task = asyncio.ensure_future(work)
    gone = {"yes": False}

    async def disconnected() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                gone["yes"] = True
                return

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (watcher, task):
            if not t.done():
                t.cancel()
        # wait for the cancellations to land, so that the engine's streams are closed on return
        await asyncio.gather(watcher, task, return_exceptions=True)
    if gone["yes"]:
        raise ApiError(499, "Client closed the request", "cancelled")
    return task.result()
