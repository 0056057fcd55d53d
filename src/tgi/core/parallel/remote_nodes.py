"""Node 0's side of a group over several hosts (`node_join.py` says what crosses the store): the store it
listens on, the other nodes' admission at join, their watch while the group runs, and their stop."""

from __future__ import annotations

import contextlib
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from tgi.core.parallel import node_join as nj
from tgi.core.parallel.dist_auth import command_key, new_session, seal
from tgi.core.parallel.rendezvous import open_leader_store
from tgi.core.parallel.topology import NodeLayout, dist_timeout_s

log = logging.getLogger(__name__)

POLL_S = 0.1
#: how long node 0's stop waits for the other nodes to say they left
LEAVE_WAIT_S = 5.0


class RemoteNodes:
    """Nodes 1..nnodes-1 as node 0 sees them, through the store it listens on (`open`)."""

    def __init__(
        self,
        store: Any,
        layout: NodeLayout,
        mine: dict[str, Any],
        config: Any,
        server: Any = None,
        secret: bytes = b"",
        session: str = "",
    ) -> None:
        # `store`: a connection of node 0's own to its store, used by nothing else (the group's rendezvous
        # blocks its connection while the ranks meet); `server`: the listening store, kept open
        self.store, self.layout, self.mine, self.config, self.server = store, layout, mine, config, server
        self.secret, self.session = secret, session  # the shared secret; this group's nonce (`node_join`)
        self.joined: dict[int, dict[str, Any]] = {}
        self.broken = (
            False  # the group failed: its stop waits for nobody (the nodes see node 0 go, and exit 1)
        )
        self.heartbeats: nj.Heartbeats | None = None

    @classmethod
    def open(
        cls, init_method: str, layout: NodeLayout, config: Any, source: Any, backend: str, secret: bytes
    ) -> RemoteNodes:
        """Listen on `init_method`'s address and port (the store the group forms on, later), and draw this
        group's session nonce there."""
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=dist_timeout_s())
        server = open_leader_store(init_method, layout.world_size, timeout)
        url = urlsplit(init_method)
        store = dist.TCPStore(url.hostname, url.port, None, False, timeout)
        mine = nj.node_record(source.path, backend, layout.world_size, layout.nnodes)
        session = new_session()
        store.set(nj.SESSION_KEY, session.encode())
        return cls(store, layout, mine, config, server, secret, session)

    @property
    def command_key(self) -> bytes:
        """The key the group's commands are sealed with, which every node derives (`dist_auth`)."""
        return command_key(self.secret, self.session)

    def admit(self, failure: Callable[[], str | None]) -> str | None:
        """Wait for every other node to join, and answer each: None when all joined and were admitted, else
        why the group cannot form (a node refused, or not there within `--dist-timeout`). `failure()` ends
        the wait early with what failed on this side."""
        timeout = dist_timeout_s()
        deadline = time.monotonic() + timeout
        pending = set(range(1, self.layout.nnodes))
        while pending:
            for k in sorted(pending):
                if not self.store.check([nj.join_key(k)]):
                    continue
                record, problem = nj.read_join(self.store.get(nj.join_key(k)), self.secret, self.session, k)
                problem = problem or nj.join_problem(self.mine, record)
                nonce = record.get("nonce") if isinstance(record.get("nonce"), str) else ""
                answer = nj.verdict(problem, self.config)
                context = nj.verdict_context(self.session, nonce[:64], k)
                self.store.set(nj.verdict_key(k), seal(self.secret, context, answer))
                if problem is not None:
                    return f"{nj.describe(k, record)} refused at join: {problem}"
                log.info("tensor parallelism: %s joined (ranks %s)", nj.describe(k, record), self._ranks(k))
                self.joined[k] = record
                pending.discard(k)
            if not pending:
                break
            mine = failure()
            if mine is not None:
                return mine
            if time.monotonic() > deadline:
                nodes = ", ".join(str(k) for k in sorted(pending))
                return (
                    f"node(s) {nodes} did not join within {timeout:g} s (--dist-timeout): is `tgi launch "
                    f"--headless --node-rank N` running there, and can it reach {self._where()}?"
                )
            time.sleep(POLL_S)
        self.heartbeats = nj.Heartbeats(self.store, self.joined, nj.GroupSeal(self.secret, self.session))
        return None

    def _ranks(self, node: int) -> str:
        ranks = range(node * self.layout.per_node, (node + 1) * self.layout.per_node)
        return f"{ranks.start}..{ranks.stop - 1}" if len(ranks) > 1 else str(ranks.start)

    def _where(self) -> str:
        return f"{self.config.master_addr}:{self.config.master_port or 'its port'}"

    def failed(self) -> str | None:
        """A node whose rank died (its own words) or that stopped answering; None while all are well."""
        if self.heartbeats is None:
            return None
        try:
            return self.heartbeats.stale()
        except Exception as exc:  # this process's own store: not expected to fail
            log.warning("tensor parallelism: cannot read the nodes' heartbeats: %s", exc)
            return None

    def close(self) -> None:
        """Tell the other nodes to stop, and wait a little for them to say they left."""
        if self.broken:
            return
        with contextlib.suppress(Exception):
            self.store.set(
                nj.SHUTDOWN_KEY, nj.GroupSeal(self.secret, self.session).seal(nj.SHUTDOWN_KEY, "stop")
            )
            deadline = time.monotonic() + LEAVE_WAIT_S
            waiting = set(self.joined)
            while waiting and time.monotonic() < deadline:
                waiting = {k for k in waiting if not self.store.check([nj.left_key(k)])}
                time.sleep(POLL_S / 2)
