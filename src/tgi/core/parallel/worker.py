"""Ranks 1..N-1 of a tensor-parallel engine: a process that holds one shard and runs what rank 0 sends.

Rank 0 (`TensorParallelRunner`) broadcasts `(command, args)` over the group's collective
(`command_channel.py`: a step as its delta, rebuilt here into the `ScheduledBatch` rank 0 runs); every rank
runs the same command (`run_command`), so the collectives inside (the model's all-reduces, the logits'
all-gather) line up. A pipe to rank 0 carries the process's life only: a worker exits when rank 0 says so
through it or it closes (rank 0 is gone), or when a command fails: then it sends the error back through it
first, for rank 0 to name it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from typing import Any

from tgi.core.parallel.command_channel import CommandReceiver
from tgi.core.parallel.dist_auth import attach_key

#: what rank 0 sends a worker through its pipe to end it; a worker sends back its error's text (bytes, never
#: pickles: `Connection.send`/`recv` would pickle)
SHUTDOWN = b"shutdown"

#: commands every rank runs; runner methods unless `run_command` handles them itself
COMMANDS = (
    "load", "initialize_cache", "warmup", "execute", "memory_info", "peak_memory", "check_lora_adapter",
    "load_lora_adapter", "unload_lora_adapter",
)  # fmt: skip


def describe_exception(exc: BaseException) -> str:
    """`ExcType: message (at file:line)`."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def peak_rss_bytes() -> tuple[int, int]:
    """(VmHWM, VmRSS) of this process in bytes: its peak and current resident memory."""
    values = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmHWM", "VmRSS"):
                    values[key] = int(rest.split()[0]) * 1024
    except OSError:  # not Linux: ru_maxrss (kB on Linux, bytes on macOS)
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak *= 1 if sys.platform == "darwin" else 1024
        values = {"VmHWM": peak, "VmRSS": peak}
    return values["VmHWM"], values["VmRSS"]


def run_command(runner: Any, backend: Any, collective: Any, name: str, args: tuple) -> Any:
    """Run one command on this rank; every rank of the group runs the same one."""
    import torch

    if name not in COMMANDS:
        raise ValueError(f"unknown tensor-parallel command {name!r}")
    if name == "memory_info":
        # the least free memory of any rank; the ranks of one host's CPU share its memory: each gets its share
        from tgi.core.interfaces.types import MemoryInfo

        device = backend.torch_device() if hasattr(backend, "torch_device") else torch.device("cpu")
        info = backend.memory_info()
        mine = torch.tensor([[info.free, info.total]], dtype=torch.float64, device=device)
        free, total = collective.all_gather(mine, dim=0).min(dim=0).values.tolist()
        if device.type == "cpu":
            free /= collective.world_size // getattr(getattr(runner, "config", None), "nnodes", 1)
        return MemoryInfo(total=int(total), free=int(free))
    if name == "check_lora_adapter":
        device = backend.torch_device() if hasattr(backend, "torch_device") else torch.device("cpu")
        return check_on_every_rank(runner, collective, args, device)
    if name == "peak_memory":
        mine = torch.tensor([peak_rss_bytes()], dtype=torch.float64)
        return [tuple(int(v) for v in row) for row in collective.all_gather(mine, dim=0).tolist()]
    result = getattr(runner, name)(*args)
    if name == "load":
        collective.barrier()  # "loaded" means every rank has loaded
    return result


def check_on_every_rank(
    runner: Any, collective: Any, args: tuple, device: Any = None
) -> tuple[list[int], Exception | None]:
    """Run `runner.check_lora_adapter(*args)` on this rank and tell every rank which ranks refused: returns
    (the refusing ranks, this rank's own error or None). A refusal is an answer, never a failed command: the
    rank logs its reason and stays in the group, so that no rank applies an adapter another one refused."""
    import torch

    error = None
    try:
        runner.check_lora_adapter(*args)
    except Exception as exc:  # any error of a check is a refusal; the group stays in step
        error = exc
        print(f"rank {collective.rank}: LoRA adapter refused: {describe_exception(exc)}", file=sys.stderr)
    mine = torch.tensor([[0.0 if error is None else 1.0]], dtype=torch.float64, device=device)
    refused = collective.all_gather(mine, dim=0).flatten().tolist()
    return [rank for rank, flag in enumerate(refused) if flag], error


def _exit_when_told(conn) -> None:
    """Ends this process when rank 0 sends "shutdown" through the pipe or the pipe closes (rank 0 is gone);
    the main thread may be blocked in a collective that no rank will join any more."""
    try:
        while conn.recv_bytes() != SHUTDOWN:
            pass
    except (EOFError, OSError):
        pass
    os._exit(0)


def worker_main(
    rank: int,
    world_size: int,
    init_method: str,
    spec: Any,
    source: Any,
    config: Any,
    conn,
    local_rank: int | None = None,
    key: bytes = b"",
) -> None:
    """The entry point of global rank `rank` (a spawned process) on device `local_rank` of its host (None:
    `rank`, a group on one host); `key` seals the group's messages (`dist_auth.command_key`)."""
    # Ctrl-C reaches the whole process group: rank 0 shuts the workers down, they must not die first
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the main thread waits in the rendezvous, then in the commands' broadcast: the pipe is watched beside it
    threading.Thread(target=_exit_when_told, args=(conn,), name="tgi-shard-life", daemon=True).start()
    try:
        from tgi.core.parallel.topology import apply_dist_timeout

        apply_dist_timeout(config.dist_timeout_s)  # --dist-timeout: the join's and the collectives'
        backend = spec.create()
        backend.bind_rank(rank if local_rank is None else local_rank)  # the device on this host
        if config.attention:  # the same kernels as rank 0
            backend.select_attention(config.attention)
        collective = backend.create_collective(rank, world_size, init_method)
        attach_key(collective, key)
        runner = backend.create_rank_runner(source, config, collective)
        receiver = CommandReceiver(collective, key)
        while True:
            name, args = receiver.receive()
            run_command(runner, backend, collective, name, args)
    except BaseException as exc:
        traceback.print_exc()
        try:
            conn.send_bytes(describe_exception(exc).encode())
            conn.close()
        finally:
            os._exit(1)
