"""The rank processes of one host: started from a fork server (`start_rank`), stopped (`stop_ranks`), and the
cause of one that ended (`exit_cause`). Rank 0's runner starts its node's other ranks with them, a headless
node (`headless.py`) all of its own."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tgi.core.parallel.worker import SHUTDOWN, worker_main


@dataclass
class RankProcess:
    rank: int  # the global rank
    process: Any  # multiprocessing.Process
    conn: Any  # duplex Connection: shutdown out, the worker's error back (commands: `CommandSender`)


#: what a fork server imports once, so that each rank starts in a fraction of a second instead of
#: importing torch and transformers itself
FORKSERVER_PRELOAD = [
    "torch",
    "tgi.core.torch.runner",
    "tgi.core.parallel.layers",
    "tgi.core.loading.safetensors_loader",
]


def process_context() -> Any:
    """A fork server where there is one (a clean process, started once, that forks the ranks), else spawn.
    Never a plain fork of this process: it has threads (the server's, torch's)."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
        return ctx
    return mp.get_context("spawn")


def start_rank(
    ctx: Any,
    rank: int,
    local_rank: int,
    world_size: int,
    init_method: str,
    spec: Any,
    source: Any,
    config: Any,
    key: bytes,
) -> RankProcess:
    """Start global rank `rank` on device `local_rank` of this host (`worker.worker_main`); `key` seals the
    group's messages."""
    parent, child = ctx.Pipe(duplex=True)
    process = ctx.Process(
        target=worker_main,
        args=(rank, world_size, init_method, spec, source, config, child, local_rank, key),
        name=f"tgi-shard-{rank}",
        daemon=True,  # never outlives the process that started it
    )
    process.start()
    child.close()
    return RankProcess(rank, process, parent)


def exit_cause(process: Any) -> str:
    code = process.exitcode
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def rank_failure(w: RankProcess, started: bool, where: str = "") -> str:
    """What a rank that ended says of itself (its error through the pipe), with how it ended."""
    cause = exit_cause(w.process)
    try:
        if w.conn.poll(0.5):
            text = w.conn.recv_bytes(64 * 1024).decode(errors="replace")
            cause = f"{text} ({cause})"
    except (EOFError, OSError):
        pass
    what = "died" if started else "failed to start"
    return f"shard rank {w.rank} (pid {w.process.pid}{where}) {what}: {cause}"


def stop_ranks(
    workers: list[RankProcess], timeout: float = 10.0, then: Callable[[], None] | None = None
) -> None:
    """Tell every rank to stop, make sure it did, then call `then` (also the finaliser of a forgotten
    runner)."""
    for w in workers:
        with contextlib.suppress(OSError):
            w.conn.send_bytes(SHUTDOWN)
    deadline = time.monotonic() + timeout
    for w in workers:
        w.process.join(max(0.0, deadline - time.monotonic()))
        if w.process.is_alive():
            w.process.kill()
            w.process.join(5)
        w.conn.close()
    if then is not None:
        then()
