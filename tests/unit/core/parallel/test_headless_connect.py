"""A headless node reaching node 0's store (`tgi.core.parallel.headless._connect`), with real c10d stores:
soon after node 0 listens however long it took to start, and a refusal with the reason past --dist-timeout."""

from __future__ import annotations

import datetime
import socket
import threading
import time

import pytest
import torch.distributed as dist

from tgi.core.parallel import headless
from tgi.core.parallel.topology import ENV_TIMEOUT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_node_0_that_listens_late_is_reached_soon_after_and_keeps_the_dist_timeout(monkeypatch):
    monkeypatch.setenv(ENV_TIMEOUT, "60")
    port, listening = _free_port(), {}

    def node_0():  # starts listening 15 s late, as a node 0 still loading its model
        time.sleep(15)
        listening["store"] = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=60))
        listening["at"] = time.monotonic()

    threading.Thread(target=node_0, daemon=True).start()
    store = headless._connect("127.0.0.1", port)
    waited = time.monotonic() - listening["at"]
    # a client left to its own retries reached a store that listened after 15 s ~10 s later (40 s: 24 s)
    assert waited < headless.CONNECT_ATTEMPT_S + 1.5, waited
    assert store.timeout == datetime.timedelta(seconds=60)


def test_no_node_0_within_the_dist_timeout_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setenv(ENV_TIMEOUT, "3")
    started = time.monotonic()
    with pytest.raises(dist.DistNetworkError, match="timed out"):
        headless._connect("127.0.0.1", _free_port())
    assert 3 <= time.monotonic() - started < 3 + headless.CONNECT_ATTEMPT_S + 2
