"""How the nodes of a group over several hosts meet on rank 0's store before the group forms, and how they
keep watch on each other afterwards. Torch-free: the store is any object with c10d's `Store` methods
(`set`, `get`, `check`, `add`, `wait`).

- **Join.** Node k writes `tgi/join/k` (JSON: its package version, model fingerprint, backend, --num-shard,
  --nnodes, host and pid); node 0 compares it with its own (`join_problem`) and answers in `tgi/verdict/k`
  (pickled: the reason it is refused, or None and node 0's engine config, which node k's ranks then run
  with, so that the dtype, the limits and the kernels are node 0's). A refused node and node 0 both log the
  reason and exit 1.
- **Liveness.** Node k adds 1 to `tgi/heartbeat/k` every `HEARTBEAT_INTERVAL_S`; node 0 names a node whose
  count has not moved for `HEARTBEAT_TIMEOUT_S` (its process or host is gone: a killed host closes no
  socket). A node whose rank dies writes why in `tgi/failure/k` before it exits. A node whose store calls
  fail has lost node 0.
- **Stop.** Node 0 sets `tgi/shutdown`; each node stops its ranks, writes `tgi/left/k` and exits 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import socket
import time
from typing import Any

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
    return f"node {node} ({record.get('host')}, pid {record.get('pid')})"


def decode(value: bytes) -> dict[str, Any]:
    return json.loads(value.decode())


def encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record).encode()


def verdict(reason: str | None, config: Any) -> bytes:
    return pickle.dumps((reason, None if reason else config))


class Heartbeats:
    """Node 0's view of the other nodes' heartbeats: `stale()` names the first that stopped moving."""

    def __init__(self, store: Any, nodes: dict[int, dict[str, Any]]) -> None:
        self.store, self.nodes = store, nodes
        now = time.monotonic()
        self.seen = {k: (-1, now) for k in nodes}

    def stale(self) -> str | None:
        now = time.monotonic()
        for k, record in self.nodes.items():
            if self.store.check([failure_key(k)]):
                return f"{describe(k, record)}: {self.store.get(failure_key(k)).decode()}"
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
