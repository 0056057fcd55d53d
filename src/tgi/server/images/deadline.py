"""One image fetch's deadline and cancellation (`FetchGuard`): a watchdog that shuts the fetch's socket
down when its deadline passes or its client leaves, so that no server, however slowly it answers, holds
a fetch thread past the deadline (`tgi.server.images.fetch`)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class FetchEnded(Exception):
    """The fetch's deadline passed, or its client left."""


class FetchGuard:
    """One fetch's deadline, `seconds` from now, and its way to be abandoned. The fetch registers each socket
    it opens (`watch`); when the deadline passes (a timer thread, started with the first socket) or
    `cancel()` is called (the client left), that socket is shut down, which ends any read blocked on it, and
    every later step of the fetch raises."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._deadline = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._timer: threading.Timer | None = None
        self.ended: str | None = None  # "deadline" or "cancelled"

    def cancel(self) -> None:
        """Abandon the fetch (its client left): its socket is shut down, and it raises at its next step."""
        self._end("cancelled")

    def left(self) -> float:
        """Seconds left before the deadline; `FetchEnded` when none are, or the fetch was cancelled."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            self._end("deadline")
        if self.ended is not None:
            raise FetchEnded
        return left

    def watch(self, sock: socket.socket) -> None:
        """Shut `sock` down when the fetch ends early; `FetchEnded` (and `sock` shut down) if it has already."""
        with self._lock:
            if self.ended is None:
                self._socket = sock
                if self._timer is None:
                    self._timer = threading.Timer(max(0.0, self._deadline - time.monotonic()), self._end)
                    self._timer.daemon = True
                    self._timer.start()
                return
        _shut_down(sock)
        raise FetchEnded

    def finish(self) -> None:
        """The fetch is over: no socket to shut down, no timer left running."""
        with self._lock:
            self._socket, timer, self._timer = None, self._timer, None
        if timer is not None:
            timer.cancel()

    def _end(self, why: str = "deadline") -> None:
        with self._lock:
            if self.ended is None:
                self.ended = why
            sock = self._socket
        if sock is not None:
            _shut_down(sock)


def _shut_down(sock: socket.socket) -> None:
    """Shut `sock` down from any thread: a read blocked on it returns at once (closing it would not wake
    it). The plain socket's shutdown, also under TLS (`SSLSocket.shutdown` drops its TLS state instead)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
