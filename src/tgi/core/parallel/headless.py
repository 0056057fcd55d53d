"""A node other than 0 of a group over several hosts (`tgi launch --headless`): it serves nothing itself. It
joins node 0 through its store with the shared secret (`node_join.py`, `dist_auth.py`: refused, or without
a secret, it logs why, tells node 0, and exits 1), starts its ranks with node 0's engine config, and
watches them: a rank that dies is reported to node 0 through the store and ends the
node (exit 1); so does node 0 gone (the store no longer answers); node 0's stop ends it with 0."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from tgi.core.parallel import node_join as nj
from tgi.core.parallel import wire
from tgi.core.parallel.dist_auth import (
    NAMES,
    AuthError,
    SecretError,
    command_key,
    new_session,
    open_sealed,
    require_secret,
    seal,
    unsigned_payload,
)
from tgi.core.parallel.processes import RankProcess, process_context, rank_failure, start_rank, stop_ranks
from tgi.core.parallel.rendezvous import open_rendezvous
from tgi.core.parallel.topology import DEFAULT_MULTI_NODE_PORT, NodeLayout, apply_dist_timeout, dist_timeout_s

log = logging.getLogger(__name__)

POLL_S = 0.1


def run_headless(config: Any, registry: Any = None, say: Callable[[str], None] | None = None) -> int:
    """Run node `config.node_rank` until the group ends; returns the process's exit code."""
    from tgi.core.loading import resolve_model
    from tgi.core.plugins import BackendRegistry

    say = say or log.info
    layout = NodeLayout(config.world_size, config.nnodes, config.node_rank)
    apply_dist_timeout(config.dist_timeout_s)
    try:
        secret = require_secret(config.dist_secret_file, layout.nnodes)
    except SecretError as exc:  # refused at start; node 0 is told below, at join
        log.error("node %d: refused at start: %s", layout.node_rank, exc)
        secret = None
    spec = (registry or BackendRegistry()).select(config.backend)
    source = resolve_model(config.model_id, config.revision, config.trust_remote_code)
    port = config.master_port if config.master_port is not None else DEFAULT_MULTI_NODE_PORT
    init_method = open_rendezvous(config.master_addr, port).init_method
    node = layout.node_rank
    say(f"node {node} of {layout.nnodes}: ranks {list(layout.ranks)}, joining node 0 at {init_method}")
    try:
        store = _connect(config.master_addr, port)
        record = nj.node_record(source.path, spec.name, layout.world_size, layout.nnodes)
        leader_config, session = _join(store, node, record, secret)
    except _Refused as exc:
        log.error("node %d: %s", node, exc)
        return 1
    except Exception as exc:  # no store within --dist-timeout, or it went away
        log.error("node %d: could not join node 0 at %s: %s", node, init_method, exc)
        return 1
    if leader_config.rope_scaling is not None:  # as node 0's start applies it
        source = dataclasses.replace(source, rope_scaling=leader_config.rope_scaling)
    # beats from now on, on a connection of its own: starting the ranks takes seconds (a fork server boots)
    seals = nj.GroupSeal(secret, session)
    beats = _Heartbeat(_connect(config.master_addr, port), node, seals)
    beats.start()
    ctx = process_context()
    key = command_key(secret, session)
    workers = [
        start_rank(
            ctx, layout.global_rank(i), i, layout.world_size, init_method, spec, source, leader_config, key
        )
        for i in range(layout.per_node)
    ]
    say(f"node {node}: admitted; ranks started (pids {', '.join(str(w.process.pid) for w in workers)})")
    return _supervise(store, node, workers, beats, seals)


class _Refused(Exception):
    pass


class _Heartbeat(threading.Thread):
    """Adds 1 to this node's heartbeat every `HEARTBEAT_INTERVAL_S`, and notices node 0's stop (`shutdown`),
    a stop whose seal fails (`forged`), or that node 0 is gone (`gone`: why its store did not answer)."""

    def __init__(self, store: Any, node: int, seals: nj.GroupSeal) -> None:
        super().__init__(name="tgi-node-heartbeat", daemon=True)
        store.set_timeout(datetime.timedelta(seconds=nj.HEARTBEAT_TIMEOUT_S))  # a silent node 0 fails a call
        self.store, self.node, self.seals = store, node, seals
        self.shutdown = threading.Event()
        self.gone: str | None = None
        self.forged: str | None = None

    def run(self) -> None:
        try:
            while True:
                self.store.add(nj.heartbeat_key(self.node), 1)
                if self.store.check([nj.SHUTDOWN_KEY]):
                    try:
                        self.seals.open(nj.SHUTDOWN_KEY, self.store.get(nj.SHUTDOWN_KEY), "node 0's stop")
                    except AuthError as exc:
                        self.forged = str(exc)
                    self.shutdown.set()
                    return
                time.sleep(nj.HEARTBEAT_INTERVAL_S)
        except Exception as exc:
            self.gone = str(exc) or type(exc).__name__


#: seconds of one attempt to reach node 0's store: a client's own retries back off further and further (a
#: node 0 that took 40 s to listen was reached after 64 s), so attempts stay short and follow each other
CONNECT_ATTEMPT_S = 2.0


def _connect(host: str, port: int) -> Any:
    """A client of node 0's store, tried until it listens or --dist-timeout has passed; its operations then
    wait up to --dist-timeout."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=dist_timeout_s())
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        attempt = min(CONNECT_ATTEMPT_S, max(deadline - time.monotonic(), 0.1))
        try:
            store = dist.TCPStore(host, port, None, False, datetime.timedelta(seconds=attempt))
        except dist.DistNetworkError:  # nobody listens yet (or the address is wrong: said at the deadline)
            if time.monotonic() >= deadline:
                raise
            continue
        store.set_timeout(timeout)
        return store


def _join(store: Any, node: int, record: dict[str, Any], secret: bytes | None) -> tuple[Any, str]:
    """Say who this node is, sealed with `secret`, and wait for node 0's answer: its engine config and the
    group's session, or `_Refused` with why. Without a secret the record goes unsigned, for node 0 to
    refuse by name, and this node is refused whatever the answer."""
    store.wait([nj.SESSION_KEY])  # node 0 writes it as it starts listening
    session = store.get(nj.SESSION_KEY).decode(errors="replace")
    if len(session) != 32 or any(c not in "0123456789abcdef" for c in session):
        raise _Refused(f"refused at join: node 0's session {session[:40]!r} is not a nonce")
    if store.add(nj.claim_key(node), 1) > 1:
        raise _Refused(f"refused at join: another node already joined as node {node} (--node-rank)")
    record = {**record, "nonce": new_session()}
    store.set(nj.join_key(node), seal(secret, nj.join_context(session, node), nj.encode(record)))
    store.wait([nj.verdict_key(node)])  # until node 0 answers, or --dist-timeout
    sealed = store.get(nj.verdict_key(node))
    context = nj.verdict_context(session, record["nonce"], node)
    try:
        if secret is None:  # node 0's reason, unchecked: only to say it
            reason, _ = nj.read_verdict(unsigned_payload(sealed))
            raise _Refused(f"refused at join by node 0: {reason or 'no shared secret'}")
        reason, config = nj.read_verdict(open_sealed(secret, context, sealed, "node 0's answer"))
    except AuthError as exc:
        raise _Refused(f"refused at join: {exc} (the nodes' {NAMES} differ)") from None
    except wire.WireError as exc:
        raise _Refused(f"refused at join: {exc}") from None
    if reason is not None:
        raise _Refused(f"refused at join by node 0: {reason}")
    return config, session


def _supervise(
    store: Any, node: int, workers: list[RankProcess], beats: _Heartbeat, seals: nj.GroupSeal
) -> int:
    """Watch this node's ranks until node 0 stops the group (0), a rank dies or node 0 is gone (1)."""
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopped.set())
    store.set_timeout(datetime.timedelta(seconds=nj.HEARTBEAT_TIMEOUT_S))
    try:
        while True:
            if beats.forged is not None:
                log.error("node %d: %s; stopping", node, beats.forged)
                return 1
            if beats.shutdown.is_set():
                log.info("node %d: node 0 stopped the group", node)
                return 0
            if stopped.is_set():
                _tell(store, nj.failure_key(node), f"node {node} was stopped (SIGTERM/SIGINT)", seals)
                log.info("node %d: stopped by a signal", node)
                return 0
            if beats.gone is not None:
                log.error(
                    "node %d: node 0 is gone (its store does not answer: %s); stopping", node, beats.gone
                )
                return 1
            dead = next((w for w in workers if not w.process.is_alive()), None)
            if dead is not None:
                return _rank_died(store, node, dead, seals)
            time.sleep(POLL_S)
    finally:
        stop_ranks(workers, timeout=5.0)
        with contextlib.suppress(Exception):
            store.set(nj.left_key(node), b"1")


def _rank_died(store: Any, node: int, dead: RankProcess, seals: nj.GroupSeal) -> int:
    cause = rank_failure(dead, True, f" on node {node}")
    with contextlib.suppress(Exception):
        if store.check([nj.SHUTDOWN_KEY]):  # node 0 is stopping the group: its ranks leave
            seals.open(nj.SHUTDOWN_KEY, store.get(nj.SHUTDOWN_KEY), "node 0's stop")
            log.info("node %d: node 0 stopped the group", node)
            return 0
    if _tell(store, nj.failure_key(node), cause, seals):
        log.error("node %d: %s; stopping", node, cause)
    else:
        log.error("node %d: %s, and node 0 is gone (its store does not answer); stopping", node, cause)
    return 1


def _tell(store: Any, key: str, message: str, seals: nj.GroupSeal) -> bool:
    try:
        store.set(key, seals.seal(key, message))
        return True
    except Exception:
        return False
