"""A headless node reaching node 0's store (`tgi.core.parallel.headless._connect`), with real c10d stores:
soon after node 0 listens however long it took to start, and a refusal with the reason past --dist-timeout."""

from __future__ import annotations

import datetime
import socket
import time

import pytest
import torch.distributed as dist

from tgi.core.parallel import headless
from tgi.core.parallel.topology import ENV_TIMEOUT

#: the longest a try may wait for node 0 (c10d's own retries back off well past it)
MAX_TRY_S = 5.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_node_0_that_listens_late_is_reached_soon_after_and_keeps_the_dist_timeout(monkeypatch):
    """Reached within one short try of node 0 listening: every try is bounded by CONNECT_ATTEMPT_S (a client
    left to c10d's own retries backs off: it reached a store that listened after 15 s ~10 s later), so the
    tries themselves show it, not two clocks; the store then keeps --dist-timeout."""
    monkeypatch.setenv(ENV_TIMEOUT, "60")
    monkeypatch.setattr(headless, "CONNECT_ATTEMPT_S", 0.5)  # short tries: the first fails sooner
    port, real_store = _free_port(), dist.TCPStore
    tries: list[float] = []  # the timeout of each client try
    node_0: list = []

    def tcp_store(host, port_, world, is_master, timeout, *args, **kwargs):
        if is_master:
            return real_store(host, port_, world, is_master, timeout, *args, **kwargs)
        tries.append(timeout.total_seconds())
        try:
            return real_store(host, port_, world, is_master, timeout, *args, **kwargs)
        finally:  # node 0 listens once a first try has failed, as one still loading its model would
            if not node_0:
                node_0.append(real_store("127.0.0.1", port, None, True, datetime.timedelta(seconds=60)))

    monkeypatch.setattr(dist, "TCPStore", tcp_store)
    client = headless._connect("127.0.0.1", port)
    assert len(tries) >= 2 and all(t <= MAX_TRY_S for t in tries), tries
    assert client.timeout == datetime.timedelta(seconds=60)


def test_no_node_0_within_the_dist_timeout_is_refused_with_the_reason(monkeypatch):
    monkeypatch.setenv(ENV_TIMEOUT, "2")
    monkeypatch.setattr(headless, "CONNECT_ATTEMPT_S", 0.5)  # several tries within the timeout
    started = time.monotonic()
    with pytest.raises(dist.DistNetworkError, match="timed out"):
        headless._connect("127.0.0.1", _free_port())
    # not before the timeout; the upper bound is liveness only (10x what a refusal past it takes)
    assert time.monotonic() - started >= 2
    assert time.monotonic() - started < 2 + 10 * 2.0
