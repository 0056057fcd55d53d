"""`tgi launch` / `text-generation-launcher`: TGI's launcher flags (and their environment variables), model
loading with progress, then uvicorn with a graceful SIGTERM (stop accepting, drain, exit 0)."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import socket
import sys
import time

from tgi.core.config import ConfigError, EngineConfig
from tgi.server.flags import add_flags, engine_fields, server_fields
from tgi.server.flags.derived import served_models
from tgi.server.flags.launcher_actions import (
    apply_hub_cache,
    environment_report,
    runtime_lora_warning,
    tokenizer_config,
)
from tgi.server.flags.unserved import unserved_variables, warning
from tgi.server.http.errors import escaped
from tgi.server.service.settings import ServerSettings

log = logging.getLogger("tgi.server")


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """TGI's launcher flags and ours, from the flag table (`tgi.server.flags`); each defaults to its
    environment variable (named in the help)."""
    add_flags(parser)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "target": record.name,
            "fields": {"message": record.getMessage()},
        }
        if record.exc_info:
            entry["fields"]["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(json_output: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter()
        if json_output
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The engine's config from the flags; `ConfigError` names a refused flag, a value out of range or flags
    that contradict each other, and why."""
    return EngineConfig(**engine_fields(args))


def server_settings(args: argparse.Namespace, on_ready=None) -> ServerSettings:
    """The server's settings from the flags (`ConfigError` as `engine_config`)."""
    return ServerSettings(**server_fields(args), on_ready=on_ready)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run_launch(args: argparse.Namespace) -> int:
    try:
        config = engine_config(args)
        server_settings(args)  # its checks too (watermark, OTLP), before the model loads
        if not args.headless:  # node 0 of a group over several hosts: the nodes' shared secret, read now
            # (a headless node without one tells node 0 why it stops: `run_headless`)
            from tgi.core.parallel.dist_auth import require_secret

            require_secret(config.dist_secret_file, config.nnodes)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    setup_logging(args.json_output)
    if args.allow_runtime_lora_updating:
        log.warning(runtime_lora_warning(os.path.realpath(args.lora_root)))
    if args.env:
        print(environment_report(), file=sys.stderr, flush=True)
    apply_hub_cache(args.huggingface_hub_cache)
    unserved = unserved_variables()
    if unserved:
        log.warning(warning(unserved))
    if args.headless:  # a node other than 0 of a multi-host group: its ranks only, no HTTP port
        from tgi.core.parallel.headless import run_headless

        return run_headless(config, say=lambda message: log.info(message))
    try:
        sock = _bind(args.hostname, args.port)
    except OSError as exc:
        print(f"error: cannot listen on {args.hostname}:{args.port}: {exc}", file=sys.stderr)
        return 2

    from tgi.core.async_engine import AsyncEngine

    def progress(message: str) -> None:
        log.info(message) if args.json_output else print(message, file=sys.stderr, flush=True)

    from tgi.core.interfaces import UnsupportedError
    from tgi.core.loading import ModelNotFoundError
    from tgi.core.models.registry import UnsupportedModelError
    from tgi.core.plugins import BackendSelectionError
    from tgi.core.request import EngineError

    try:
        engine = AsyncEngine.from_config(config, progress=progress)
    except (
        ConfigError,
        BackendSelectionError,
        UnsupportedError,
        UnsupportedModelError,
        ModelNotFoundError,
    ) as exc:
        # settings checked against the backend, the model and the memory at load
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EngineError as exc:  # e.g. a shard that failed to start
        print(f"error: {exc}", file=sys.stderr)
        return 1

    if args.allow_runtime_lora_updating and not engine.engine.runner.capabilities().lora_runtime_loading:
        print(
            "error: --allow-runtime-lora-updating: this backend's runner does not load LoRA adapters at run "
            "time (core's native models on torch backends do, without CUDA graphs)",
            file=sys.stderr,
        )
        engine.engine.runner.shutdown()
        return 2
    if args.tokenizer_config_path:  # its chat template replaces the model's (checked at start)
        engine.tokenizer.chat_template = tokenizer_config(args.tokenizer_config_path)["chat_template"]
    from tgi.server.chat.parsers import unfit_parsers

    unfit = unfit_parsers(args.reasoning_parser, args.tool_call_parser, engine.tokenizer.chat_template)
    if unfit is not None:
        print(f"error: {unfit}", file=sys.stderr)
        engine.engine.runner.shutdown()
        return 2
    host, port = sock.getsockname()[:2]
    where = f"http://{host}:{port}"
    ready = f"tgi serving {engine.model_id} on {where} (backend {engine.backend_name})"
    served = served_models(args)
    models = None
    if len(served) > 1:
        from tgi.server.served_models.loading import model_configs

        models = model_configs(config, served)
        others = ", ".join(name for name, _ in served[1:])
        ready = f"tgi serving {served[0][0]} on {where} (backend {engine.backend_name}); also {others}, each "
        ready += "loaded at its first request"

    def on_ready() -> None:
        log.info(ready) if args.json_output else print(ready, flush=True)

    settings = server_settings(args, on_ready)
    # `serve` owns the engine from here: this frame must not hold it, or a model swap could never free the
    # start-up model (the list hands it over without a local left behind)
    handed_over = [engine]
    del engine
    return serve(handed_over.pop(), settings, sock, models)


def freeze_loaded_objects() -> None:
    """Collect the loading's garbage, then exempt every object alive now (the model, the tokenizer, the
    app) from garbage collection. Loading leaves ~0.9 million tracked objects, and each full collection
    traverses them all: a pause of hundreds of milliseconds, holding the GIL, so the engine thread and the
    event loop both stall mid-stream. Frozen, they are skipped; the requests' own objects are collected as
    before."""
    gc.collect()
    gc.freeze()


def serve(
    engine,
    settings: ServerSettings,
    sock: socket.socket,
    models: list[tuple[str, EngineConfig]] | None = None,
) -> int:
    """Run uvicorn on an already bound socket until SIGTERM/SIGINT; returns 0 after a graceful stop, 1 when
    the engine died. The app's service holds the engine from then on (this frame drops it), so that a model
    swapped out is freed."""
    import uvicorn

    from tgi.server.app import create_app

    app = create_app(engine, settings, models)
    config = uvicorn.Config(
        app,
        log_config=None,
        timeout_graceful_shutdown=int(max(settings.shutdown_grace_s, 1)),
        timeout_keep_alive=5,
        access_log=False,
    )
    server = uvicorn.Server(config)
    if engine.on_death is None:  # (`ServingEngine.on_death`) unless the caller set its own
        # a dead engine ends the process (exit 1, the cause logged below) rather than a server whose
        # /health answers 503 forever; uvicorn polls `should_exit` from its own loop
        engine.on_death = lambda _exc: setattr(server, "should_exit", True)
    del engine  # the service holds it (see the docstring)
    # uvicorn re-raises the signal it caught once it has stopped; with these handlers in place that
    # re-raise is a no-op and the process exits 0 instead of dying of SIGTERM.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    freeze_loaded_objects()
    # `run` rather than `asyncio.run(server.serve())`: uvicorn's own event loop, uvloop when it is installed
    # (as `uvicorn.run` picks it): about a quarter less CPU per streamed chunk than asyncio's default loop.
    server.run(sockets=[sock])
    service = app.state.service
    current = service.current_engine  # the first engine, or the one swapped in
    for other in service.pool.engines() if service.pool is not None else ():
        if other is not current:  # the other models loaded
            _release(other)
    _release(current)
    error = current.error
    if error is not None:  # stopped because the engine died (e.g. a shard rank), not by request
        log.error("stopped: the engine died: %s: %s", type(error).__name__, error)
        return 1
    runner = getattr(getattr(current, "engine", None), "runner", None)
    failure = getattr(runner, "failure", None)  # a tensor-parallel rank (or node) died between steps
    if isinstance(failure, str):
        log.error("stopped: %s", failure)
        return 1
    log.info("stopped")
    return 0


def _release(engine) -> None:
    """Release the stopped engine's model, ranks and process group while the interpreter is whole: left to
    the interpreter's exit, gloo's worker threads could still hold tensors whose release needs the GIL, and
    the process died of SIGABRT after a clean stop ("terminate called without an active exception", seen in
    a two-node pipeline test)."""
    try:
        engine.close()
    except Exception as exc:  # an engine thread that outlived its stop: the exit code below says why
        log.warning("the engine could not be released before exit: %s", escaped(str(exc)))
