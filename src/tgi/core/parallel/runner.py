"""Rank 0 of a tensor-parallel engine: spawns the other ranks of its node, admits the other nodes of a
group over several hosts (`remote_nodes.py`), drives every rank step by step, watches them.

One scheduler (the engine's, on rank 0). Every runner call is broadcast to ranks 1..N-1 as a command over
the group's collective (`command_channel.py`; a step as its delta from the last one, `batch_delta.py`) and
run on rank 0's own shard at the same time; sampling happens on rank 0 only (the logits are all-gathered). A
watchdog thread notices a rank that dies within a fraction of a second, names it with its cause, and
kills the others so that no rank stays blocked in a collective: rank 0's pending call fails at once (gloo
raises when a peer's socket closes) with a `ShardFailure` naming the rank. Another node's rank that dies is
named by that node through the store; a node that vanishes, by its missed heartbeats (`node_join.py`).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tgi.core.interfaces import (
    KVCacheSpec,
    MemoryInfo,
    ModelInfo,
    ModelRunner,
    RunnerCapabilities,
    RunnerConstraints,
)
from tgi.core.interfaces.batch import ScheduledBatch, StepOutput
from tgi.core.parallel.command_channel import CommandSender
from tgi.core.parallel.dist_auth import attach_key, command_key, require_secret
from tgi.core.parallel.node_join import HEARTBEAT_TIMEOUT_S
from tgi.core.parallel.processes import RankProcess, process_context, rank_failure, start_rank, stop_ranks
from tgi.core.parallel.rendezvous import open_rendezvous
from tgi.core.parallel.topology import DEFAULT_MULTI_NODE_PORT, NodeLayout, apply_dist_timeout
from tgi.core.parallel.worker import describe_exception, run_command
from tgi.core.request import EngineError

if TYPE_CHECKING:
    from tgi.core.config import EngineConfig
    from tgi.core.loading.source import ModelSource
    from tgi.core.parallel.remote_nodes import RemoteNodes
    from tgi.core.plugins.spec import BackendSpec
    from tgi.core.torch.backend import TorchBackend

log = logging.getLogger(__name__)

#: how long rank 0 waits, after one of its calls failed, for the watchdog to name a dead rank
BLAME_WAIT_S = 3.0
WATCH_INTERVAL_S = 0.1


class ShardFailure(EngineError):
    """A rank died, failed to start, or the group fell out of step: the engine cannot go on."""

    fatal = True  # AsyncEngine stops (rather than failing the step's requests and going on)

    def client_message(self) -> str:
        # the message names ranks, pids, hosts, paths and what a peer said: for the server's log only
        return "a shard of the model failed (the server log has which, and why)"


def _stop_group(workers: list[RankProcess], remote: RemoteNodes | None, rendezvous: Any) -> None:
    """The other nodes first (told through the store, before this node's ranks leave their sockets), then
    this node's ranks; then the rendezvous folder goes."""
    if remote is not None:
        remote.close()
    stop_ranks(workers, then=rendezvous.close)


class TensorParallelRunner(ModelRunner):
    """A `ModelRunner` over N ranks: rank 0's own runner (`backend.create_rank_runner` with a collective of
    N ranks) plus N-1 spawned worker processes running the same. Build it with `start()`: what
    `TorchBackend.create_runner` does for more than one device.

    On a rank's failure it logs the reason, kills the surviving workers, calls `on_failure` callbacks,
    and (when `shutdown_process` is true, or by default when a SIGTERM handler is installed, as a server
    has) sends this process SIGTERM so that the server stops. Every later call raises `ShardFailure`.
    """

    def __init__(
        self,
        spec: BackendSpec,
        backend: TorchBackend,
        source: ModelSource,
        config: EngineConfig,
        world_size: int,
        shutdown_process: bool | None = None,
    ) -> None:
        self.spec, self.backend, self.source, self.config = spec, backend, source, config
        self.world_size = world_size
        self.shutdown_process = shutdown_process
        self.workers: list[RankProcess] = []  # this node's other ranks
        self.remote: RemoteNodes | None = None  # the other nodes of a group over several hosts
        self.local: ModelRunner | None = None
        self.collective = None
        self.failure: str | None = None
        self.on_failure: list[Callable[[str], None]] = []
        self._started = False
        self._closing = threading.Event()  # set on shutdown, and at interpreter exit
        self._lock = threading.Lock()  # one command at a time
        self._failure_lock = threading.Lock()
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._finalizer = None
        self._sender: CommandSender | None = None  # the commands' broadcast, once the group has joined

    # -- start ------------------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        backend: TorchBackend,
        source: ModelSource,
        config: EngineConfig,
        world_size: int,
        progress: Callable[[str], None] | None = None,
        **kwargs: Any,
    ) -> TensorParallelRunner:
        """Check that the model splits over `world_size` ranks (`ConfigError` with the reason if not),
        spawn ranks 1..N-1 (each builds its backend from `backend.spec`), and join the group; raises
        `ShardFailure` if a rank fails to start."""
        from tgi.core.config import ConfigError
        from tgi.core.loading import load_config
        from tgi.core.parallel.layers import check_tensor_parallel

        hf_config = load_config(source)
        check_tensor_parallel(hf_config, config.num_shard)  # the shards of each pipeline stage
        if config.pipeline_parallel_size > 1:
            from tgi.core.models.registry import model_class_for
            from tgi.core.parallel.pipeline_model import check_pipeline_model

            check_pipeline_model(model_class_for(hf_config), hf_config, config.pipeline_parallel_size)
        if backend.spec is None:
            raise ConfigError(
                f"--num-shard {world_size}: backend '{backend.name}' was not created from its BackendSpec "
                "(the engine sets `backend.spec`), so its other ranks cannot be started"
            )
        runner = cls(backend.spec, backend, source, config, world_size, **kwargs)
        try:
            runner._spawn(progress or (lambda msg: log.info(msg)))
        except BaseException:
            runner.shutdown()
            raise
        return runner

    def _spawn(self, say: Callable[[str], None]) -> None:
        n = self.world_size
        layout = NodeLayout(n, self.config.nnodes, 0)  # this process: node 0, rank 0
        apply_dist_timeout(self.config.dist_timeout_s)
        self.backend.bind_rank(0)  # before its collective and runner; each worker binds its own rank
        # a private file store on this host unless TGI's --master-addr / --master-port ask for tcp (always
        # tcp over several hosts: the other nodes join through it)
        port = self.config.master_port
        port = DEFAULT_MULTI_NODE_PORT if port is None and layout.nnodes > 1 else port
        # the shared secret, required over several nodes (refused here, before anything listens, without it)
        secret = require_secret(self.config.dist_secret_file, layout.nnodes)
        rendezvous = open_rendezvous(self.config.master_addr, port)
        init_method = rendezvous.init_method
        key = command_key(None, "")  # one host: a random key of this group's, handed to its ranks
        if layout.nnodes > 1:
            from tgi.core.parallel.remote_nodes import RemoteNodes

            self.remote = RemoteNodes.open(
                init_method, layout, self.config, self.source, self.spec.name, secret
            )
            key = self.remote.command_key
            say(
                f"{self._kind()}: {n} ranks on {layout.nnodes} nodes, waiting for nodes to join at {init_method}"
            )
        ctx = process_context()
        # stops the workers on shutdown(), or when this runner is forgotten, or at exit
        self._finalizer = weakref.finalize(self, _stop_group, self.workers, self.remote, rendezvous)
        for rank in range(1, layout.per_node):
            args = (rank, layout.local_rank(rank), n, init_method, self.spec, self.source, self.config, key)
            self.workers.append(start_rank(ctx, *args))
        # at exit multiprocessing terminates the (daemonic) workers: that is no failure. Registered after
        # multiprocessing's own exit hook, so it runs first.
        atexit.register(self._closing.set)
        self._watchdog = threading.Thread(target=self._watch, name="tgi-shard-watchdog", daemon=True)
        self._watchdog.start()
        say(
            f"{self._kind()}: {n} ranks (workers here: pids {', '.join(str(w.process.pid) for w in self.workers)})"
        )
        if self.remote is not None:
            problem = self.remote.admit(lambda: self.failure)
            if problem is not None:
                self._set_failure(problem)
                raise ShardFailure(problem)

        # joining the group blocks until every rank has joined: wait for it on a helper thread, so that a
        # rank that dies on the way ends the wait at once instead of after the rendezvous timeout
        result: dict[str, Any] = {}

        def join() -> None:
            try:
                result["collective"] = self.backend.create_collective(0, n, init_method)
            except BaseException as exc:
                result["error"] = exc

        joiner = threading.Thread(target=join, name="tgi-shard-join", daemon=True)
        joiner.start()
        while joiner.is_alive():
            joiner.join(WATCH_INTERVAL_S)
            if self.failure is not None:
                raise ShardFailure(self.failure)
        if "error" in result:
            raise ShardFailure(f"rank 0 could not join the group: {describe_exception(result['error'])}")
        self.collective = result["collective"]
        attach_key(self.collective, key)
        self._sender = CommandSender(self.collective, key)
        self.local = self.backend.create_rank_runner(self.source, self.config, self.collective)
        self._started = True

    def _kind(self) -> str:
        stages = self.config.pipeline_parallel_size
        if stages == 1:
            return "tensor parallelism"
        return f"pipeline parallelism ({stages} stages × {self.config.num_shard} tensor-parallel shards)"

    # -- failure ----------------------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            for w in self.workers:
                if not w.process.is_alive() and not self._closing.is_set():
                    self._set_failure(rank_failure(w, self._started))
                    return
            problem = self.remote.failed() if self.remote is not None else None
            if problem is not None and not self._closing.is_set():
                self._set_failure(problem)
                return

    def _set_failure(self, message: str) -> None:
        with self._failure_lock:
            if self.failure is not None:
                return
            self.failure = message
        log.error("tensor parallelism: %s; stopping all ranks", message)
        if self.remote is not None:
            self.remote.broken = True
        for w in self.workers:  # no survivor stays blocked in a collective
            if w.process.is_alive():
                w.process.kill()
        for callback in self.on_failure:
            try:
                callback(message)
            except Exception:
                log.exception("on_failure callback failed")
        if not self._started or self._closing.is_set() or self.shutdown_process is False:
            return
        if self.shutdown_process or callable(signal.getsignal(signal.SIGTERM)):
            os.kill(os.getpid(), signal.SIGTERM)  # a server handles it: it stops

    def _blame(self, command: str, exc: Exception) -> Exception:
        """The error to raise for a failed call on rank 0. A dead rank, if there is one (the usual cause:
        gloo raises as soon as a peer's sockets close): `ShardFailure` naming it. Else rank 0's own error,
        as it is (a `ConfigError` stays one). Either way the group is out of step and is stopped."""
        start = time.monotonic()
        # another node's death is seen by its missed heartbeats: wait for them
        wait = BLAME_WAIT_S if self.remote is None else HEARTBEAT_TIMEOUT_S + BLAME_WAIT_S
        while self.failure is None and time.monotonic() - start < wait:
            if (
                self.remote is None
                and time.monotonic() - start > 1.0
                and all(w.process.is_alive() for w in self.workers)
            ):
                break  # nobody died: rank 0's own error
            time.sleep(WATCH_INTERVAL_S / 2)
        if self.failure is None:
            self._set_failure(f"rank 0 failed in {command}: {describe_exception(exc)}")
            return exc
        return ShardFailure(self.failure)

    # -- commands ---------------------------------------------------------------------------------------
    def _call(self, command: str, *args: Any) -> Any:
        with self._lock:
            if self.failure is not None:
                raise ShardFailure(self.failure)
            if self.local is None:
                raise ShardFailure("the tensor-parallel group is not running")
            try:
                self._sender.send(command, args)
                return run_command(self.local, self.backend, self.collective, command, args)
            except Exception as exc:
                error = self._blame(command, exc)
                if error is exc:
                    with contextlib.suppress(AttributeError):
                        exc.fatal = True  # the group is out of step: no further step can run
                    raise
                raise error from exc

    def load(self) -> ModelInfo:
        info = self._call("load")
        return dataclasses.replace(info, num_parameters=self._num_parameters())

    def _num_parameters(self) -> int:
        """Of the whole model (rank 0 holds about 1/N of it), counted on a model without storage."""
        from tgi.core.loading import load_config
        from tgi.core.models.registry import model_class_for

        config = load_config(self.source)
        return model_class_for(config)(config, device="meta").num_parameters()

    def kv_cache_spec(self) -> KVCacheSpec:
        return self.local.kv_cache_spec()  # per rank: the same on every rank

    def memory_info(self) -> MemoryInfo | None:
        """The least free memory of any rank (shared host memory counts 1/N per rank): sizing the KV
        cache from it gives every rank the same number of blocks, the minimum over ranks."""
        return self._call("memory_info")

    def peak_memory(self) -> list[tuple[int, int]]:
        """(peak, current) resident memory of every rank's process, in bytes, in rank order."""
        return self._call("peak_memory")

    def initialize_cache(self, num_blocks: int) -> None:
        self._call("initialize_cache", num_blocks)

    def warmup(self, max_batch_tokens: int, max_num_seqs: int) -> None:
        self._call("warmup", max_batch_tokens, max_num_seqs)

    def constraints(self) -> RunnerConstraints:
        return self.local.constraints()

    def capabilities(self) -> RunnerCapabilities:
        # rank 0 (this process) samples; the other ranks never see its sampled tokens: no overlapped steps
        return dataclasses.replace(self.local.capabilities(), async_steps=False)

    def execute(self, batch: ScheduledBatch) -> StepOutput:
        return self._call("execute", batch)

    @property
    def last_command_bytes(self) -> int:
        """The bytes rank 0 broadcast for its last command (for a step: its delta, as sealed JSON)."""
        return self._sender.last_bytes if self._sender is not None else 0

    def load_lora_adapter(self, name: str, path: str) -> tuple[str, ...]:
        """Validate, then apply: every rank checks the adapter (`check_lora_adapter`, a command no rank
        fails on), and only when none refused does every rank load it. A rank whose command fails leaves the
        group, so an adapter that does not fit, on any rank, must only be refused."""
        refusing, error = self._call("check_lora_adapter", name, path)
        if error is not None:  # rank 0's own reason
            raise error
        if refusing:
            from tgi.core.lora import AdapterError

            raise AdapterError(
                f"LoRA adapter '{name}': refused on tensor-parallel rank(s) {refusing} (their log says why)",
                "a tensor-parallel rank could not read it",
            )
        return self._call("load_lora_adapter", name, path)

    def unload_lora_adapter(self, name: str) -> tuple[str, ...]:
        if name not in (self.local.lora.names if self.local.lora is not None else ()):
            raise KeyError(f"LoRA adapter '{name}' is not loaded")
        return self._call("unload_lora_adapter", name)

    def shutdown(self) -> None:
        """Stop every rank and leave the group (idempotent)."""
        self._closing.set()
        self._stop.set()
        with self._lock:
            if self._finalizer is not None:
                self._finalizer()  # stop_ranks, once
            if self.local is not None:
                self.local.shutdown()
                self.local = None
            close = getattr(self.collective, "close", None)
            if close is not None:
                close()
            self.collective = None
