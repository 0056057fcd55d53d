"""How the nodes of a group over several hosts meet on rank 0's store before the group forms, and how they
keep watch on each other afterwards. Torch-free: the store is any object with c10d's `Store` methods
(`set`, `get`, `check`, `add`, `wait`).

- **Join.** Node 0 draws a session nonce and writes it in `tgi/session`. Node k writes `tgi/join/k` (JSON:
  its package version, model fingerprint, backend, --num-shard, --nnodes, host, pid and a nonce of its own),
  sealed with the shared secret over the session and the key (`dist_auth.py`); node 0 checks the seal
  (`read_join`: a node without the secret, or with another, is refused), compares the record with its own
  (`join_problem`) and answers in `tgi/verdict/k`, sealed over the session, node k's nonce and the key
  (JSON: the reason it is refused, or None and node 0's engine config, each field checked on the way in,
  which node k's ranks then run with, so that the dtype, the limits and the kernels are node 0's). A
  refused node and node 0 both log the reason and exit 1. Nothing read from the store is unpickled.
- **Liveness.** Node k adds 1 to `tgi/heartbeat/k` every `HEARTBEAT_INTERVAL_S`; node 0 names a node whose
  count has not moved for `HEARTBEAT_TIMEOUT_S` (its process or host is gone: a killed host closes no
  socket). A node whose rank dies writes why in `tgi/failure/k` before it exits. A node whose store calls
  fail has lost node 0.
- **Stop.** Node 0 sets `tgi/shutdown`; each node stops its ranks, writes `tgi/left/k` and exits 0.
  A failure report and the stop are sealed like the join (`GroupSeal`): one whose seal fails is named as
  such. The heartbeats are counters (`add`) and carry no seal.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from typing import Any

from tgi.core.parallel import wire
from tgi.core.parallel.dist_auth import (
    HOW,
    NAMES,
    AuthError,
    is_unsigned,
    open_sealed,
    seal,
    unsigned_payload,
)

HEARTBEAT_INTERVAL_S = 0.5
HEARTBEAT_TIMEOUT_S = 4.0
#: files whose names and sizes make a model's fingerprint, beside its config's bytes
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
#: what must be equal on every node (compared in this order)
COMPARED = (
    ("version", "package version"),
    ("world_size", "--num-shard"),
    ("nnodes", "--nnodes"),
    ("backend", "backend"),
    ("model", "model"),
)


def join_key(node: int) -> str:
    return f"tgi/join/{node}"


def claim_key(node: int) -> str:
    return f"tgi/claim/{node}"


def verdict_key(node: int) -> str:
    return f"tgi/verdict/{node}"


def heartbeat_key(node: int) -> str:
    return f"tgi/heartbeat/{node}"


def failure_key(node: int) -> str:
    return f"tgi/failure/{node}"


def left_key(node: int) -> str:
    return f"tgi/left/{node}"


SHUTDOWN_KEY = "tgi/shutdown"
SESSION_KEY = "tgi/session"
#: the most bytes of a join record and of a verdict (node 0's engine config)
MAX_RECORD_BYTES = 64 * 1024
MAX_VERDICT_BYTES = 1024 * 1024


def join_context(session: str, node: int) -> str:
    return f"{session}/{join_key(node)}"


def verdict_context(session: str, nonce: str, node: int) -> str:
    return f"{session}/{nonce}/{verdict_key(node)}"


def package_version() -> str:
    import importlib.metadata as md

    try:
        return md.version("tgi")
    except md.PackageNotFoundError:
        return "unknown"


def model_fingerprint(path: str) -> str:
    """`<digest> (<what it covers>)`: the SHA-256 of a model folder's config.json and of its weight files'
    names and sizes (a single file: its name and size). Equal on two hosts that hold the same checkpoint,
    wherever it lies; reading sizes, not the weights' bytes, keeps it instant."""
    digest = hashlib.sha256()
    if os.path.isfile(path):
        files = [(os.path.basename(path), os.path.getsize(path))]
    else:
        config = os.path.join(path, "config.json")
        if os.path.isfile(config):
            with open(config, "rb") as f:
                digest.update(f.read())
        files = sorted(
            (name, os.path.getsize(os.path.join(path, name)))
            for name in os.listdir(path)
            if name.endswith(WEIGHT_SUFFIXES)
        )
    digest.update(json.dumps(files).encode())
    size = sum(n for _, n in files)
    return f"{digest.hexdigest()[:16]} ({len(files)} weight file(s), {size} bytes)"


def node_record(source_path: str, backend: str, world_size: int, nnodes: int) -> dict[str, Any]:
    """What a node says of itself when it joins (node 0 fills in the same, to compare)."""
    return {
        "version": package_version(),
        "world_size": world_size,
        "nnodes": nnodes,
        "backend": backend,
        "model": model_fingerprint(source_path),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }


def join_problem(leader: dict[str, Any], node: dict[str, Any]) -> str | None:
    """Why `node` cannot join `leader`'s group (the first difference), or None."""
    for key, what in COMPARED:
        if leader.get(key) != node.get(key):
            return f"its {what} is {node.get(key)}, node 0's is {leader.get(key)}"
    return None


def describe(node: int, record: dict[str, Any]) -> str:
    """`node k (host, pid p)`, from a record that may not be trusted: host printable and short, pid a number."""
    host = "".join(c for c in str(record.get("host"))[:64] if c.isprintable())
    pid = record.get("pid") if type(record.get("pid")) is int else "?"
    return f"node {node} ({host}, pid {pid})"


def decode(value: bytes) -> dict[str, Any]:
    record = wire.loads(value, "a node's join record", MAX_RECORD_BYTES)
    if not isinstance(record, dict):
        raise wire.WireError("a node's join record is not an object")
    return record


def encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode()


def read_join(sealed: bytes, secret: bytes, session: str, node: int) -> tuple[dict[str, Any], str | None]:
    """Node 0's reading of node `node`'s join value: its record, and why it is refused before any comparison
    (no secret, another secret, not a record), or None when its seal checks."""
    try:
        record = decode(unsigned_payload(sealed))
    except wire.WireError as exc:
        return {}, f"its join record cannot be read ({exc})"
    if is_unsigned(sealed):
        return record, f"it has no shared secret: give every node the same one with {HOW}"
    try:
        open_sealed(secret, join_context(session, node), sealed, "its join record")
    except AuthError as exc:
        return record, f"{exc} (the nodes' {NAMES} differ)"
    return record, None


def verdict(reason: str | None, config: Any) -> bytes:
    """Node 0's answer: why node k is refused, or None and node 0's engine config (its secret's path left
    out: each node reads its own)."""
    data = None
    if reason is None:
        data = wire.to_data(config)
        data["dist_secret_file"] = None
    return wire.dumps({"reason": reason, "config": data})


def read_verdict(payload: bytes) -> tuple[str | None, Any]:
    """(reason, None) or (None, node 0's `EngineConfig`), every field checked; `WireError` otherwise."""
    from tgi.core.config import EngineConfig

    answer = wire.loads(payload, "node 0's answer", MAX_VERDICT_BYTES)
    if not isinstance(answer, dict) or set(answer) != {"reason", "config"}:
        raise wire.WireError("node 0's answer is not a reason and a config")
    reason = wire.check(answer["reason"], str | None, "node 0's answer.reason")
    if reason is not None:
        return "".join(c for c in reason[:2000] if c.isprintable()), None
    return None, wire.from_data(EngineConfig, answer["config"], "node 0's engine config")


class GroupSeal:
    """The values written once the group formed (a node's failure report, node 0's stop), sealed with the
    shared secret over the session and their key; without a secret (tests of one node) plain text."""

    def __init__(self, secret: bytes | None = None, session: str = "") -> None:
        self.secret, self.session = secret, session

    def seal(self, key: str, text: str) -> bytes:
        if self.secret is None:
            return text.encode()
        return seal(self.secret, f"{self.session}/{key}", text.encode())

    def open(self, key: str, value: bytes, what: str) -> str:
        """The text of `value`; `AuthError` naming `what` when its seal fails."""
        if self.secret is not None:
            value = open_sealed(self.secret, f"{self.session}/{key}", value, what)
        return value.decode(errors="replace")


class Heartbeats:
    """Node 0's view of the other nodes' heartbeats: `stale()` names the first that stopped moving, or
    whose rank died (its own report, whose seal is checked)."""

    def __init__(self, store: Any, nodes: dict[int, dict[str, Any]], seals: GroupSeal | None = None) -> None:
        self.store, self.nodes, self.seals = store, nodes, seals or GroupSeal()
        now = time.monotonic()
        self.seen = {k: (-1, now) for k in nodes}

    def stale(self) -> str | None:
        now = time.monotonic()
        for k, record in self.nodes.items():
            if self.store.check([failure_key(k)]):
                try:
                    report = self.seals.open(
                        failure_key(k), self.store.get(failure_key(k)), "its failure report"
                    )
                except AuthError as exc:
                    report = f"{exc} (forged, or another secret)"
                return f"{describe(k, record)}: {report}"
            count = self.store.add(heartbeat_key(k), 0)
            last, since = self.seen[k]
            if count != last:
                self.seen[k] = (count, now)
            elif now - since > HEARTBEAT_TIMEOUT_S:
                return (
                    f"{describe(k, record)} stopped answering: no heartbeat for {now - since:.1f} s "
                    "(its process or its host is gone)"
                )
        return None
