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
from tgi.core.interfaces.quantization import QUANTIZE_METHODS
from tgi.server.launch_flags import (
    add_tgi_arguments,
    apply_hub_cache,
    check_tgi_arguments,
    cors_origins,
    env,
    environment_report,
    on_off,
    rope_scaling,
    tokenizer_config,
)
from tgi.server.operator_flags import (
    add_operator_arguments,
    operator_engine_settings,
    operator_settings,
    runtime_lora_warning,
)
from tgi.server.production_flags import add_production_arguments, production_settings
from tgi.server.settings import ServerSettings
from tgi.server.tgi_env import unserved_variables, warning

log = logging.getLogger("tgi.server")


def _flag(value) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """TGI's launcher flags; each defaults to its environment variable (named in the help)."""
    a = parser.add_argument
    a(
        "--model-id",
        default=env("MODEL_ID"),
        help="hub id, local folder or .gguf file; default: the default model [env: MODEL_ID]",
    )
    a("--revision", default=env("REVISION"), help="model revision on the hub [env: REVISION]")
    a(
        "--backend",
        default=env("TGI_BACKEND", default="auto"),
        help="backend plugin name, or auto [env: TGI_BACKEND]",
    )
    a(
        "--dtype",
        default=env("DTYPE"),
        help="float16, bfloat16 or float32; default: the backend's [env: DTYPE]",
    )
    a(
        "--num-shard",
        type=int,
        default=int(env("NUM_SHARD", default=1)),
        help="tensor-parallel shards [env: NUM_SHARD]",
    )
    a(
        "--attention",
        default=env("ATTENTION"),
        help="attention implementation of the backend (e.g. triton, flash-attn on cuda; cpu-native, "
        "cpu-sdpa on cpu); default: the backend's own [env: ATTENTION]",
    )
    a(
        "--prefix-caching",
        type=on_off,
        default=env("PREFIX_CACHING", default="true"),  # a string default goes through `type` too
        metavar="{true,false}",
        help="reuse the KV blocks of prompts already seen; default: true [env: PREFIX_CACHING]",
    )
    a(
        "--speculate",
        type=int,
        default=int(env("SPECULATE", default=0)),
        help="draft tokens verified per decode step, guessed by n-gram prompt lookup (or by "
        "--speculative-model); 0: off [env: SPECULATE]",
    )
    a(
        "--speculative-model",
        default=env("SPECULATIVE_MODEL"),
        help="a smaller model with the same tokenizer that guesses the --speculate tokens "
        "[env: SPECULATIVE_MODEL]",
    )
    a(
        "--lora-adapters",
        default=env("LORA_ADAPTERS"),
        help="LoRA adapters (PEFT folders) served beside the model, chosen per request by `adapter_id` "
        "or OpenAI's `model`: id=path,id2=path2 (a bare path is its own id) [env: LORA_ADAPTERS]",
    )
    a(
        "--allow-runtime-lora-updating",
        action="store_true",
        default=_flag(env("ALLOW_RUNTIME_LORA_UPDATING", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", default="")),
        help="serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's routes): adapters loaded "
        "and unloaded at run time, from under --lora-root, by callers holding --admin-api-key (both needed); "
        "off by default, as whoever calls them changes what the server runs "
        "[env: ALLOW_RUNTIME_LORA_UPDATING or vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING]",
    )
    a(
        "--quantize",
        default=env("QUANTIZE"),
        metavar="{" + ",".join(QUANTIZE_METHODS) + "}",
        help="weight quantization: a quantized checkpoint's own (gptq, awq, compressed-tensors, fp8) is "
        "detected from its config.json; on a dense checkpoint eetq (int8) and fp8 quantize while loading. "
        "A value the model or backend cannot serve fails at start with the reason [env: QUANTIZE]",
    )
    a(
        "--max-input-tokens",
        "--max-input-length",
        dest="max_input_tokens",
        type=int,
        default=_int(env("MAX_INPUT_TOKENS", "MAX_INPUT_LENGTH")),
        help="longest prompt in tokens; default: max-total-tokens - 1 [env: MAX_INPUT_TOKENS, MAX_INPUT_LENGTH]",
    )
    a(
        "--max-total-tokens",
        type=int,
        default=_int(env("MAX_TOTAL_TOKENS")),
        help="prompt + generated tokens per request; default: the model's context [env: MAX_TOTAL_TOKENS]",
    )
    a(
        "--max-batch-prefill-tokens",
        type=int,
        default=_int(env("MAX_BATCH_PREFILL_TOKENS")),
        help="token budget of one step [env: MAX_BATCH_PREFILL_TOKENS]",
    )
    a(
        "--max-batch-total-tokens",
        type=int,
        default=_int(env("MAX_BATCH_TOTAL_TOKENS")),
        help="KV-cache size in tokens; default: from free memory [env: MAX_BATCH_TOTAL_TOKENS]",
    )
    a(
        "--max-batch-size",
        type=int,
        default=_int(env("MAX_BATCH_SIZE")),
        help="sequences running at once [env: MAX_BATCH_SIZE]",
    )
    a(
        "--max-concurrent-requests",
        type=int,
        default=int(env("MAX_CONCURRENT_REQUESTS", default=128)),
        help="more in flight get 429 [env: MAX_CONCURRENT_REQUESTS]",
    )
    a("--max-best-of", type=int, default=int(env("MAX_BEST_OF", default=2)), help="[env: MAX_BEST_OF]")
    a(
        "--max-stop-sequences",
        type=int,
        default=int(env("MAX_STOP_SEQUENCES", default=4)),
        help="[env: MAX_STOP_SEQUENCES]",
    )
    a(
        "--max-top-n-tokens",
        type=int,
        default=int(env("MAX_TOP_N_TOKENS", default=5)),
        help="[env: MAX_TOP_N_TOKENS]",
    )
    a("--hostname", default=env("HOSTNAME", default="0.0.0.0"), help="[env: HOSTNAME]")
    a(
        "-p",
        "--port",
        type=int,
        default=int(env("PORT", default=3000)),
        help="[env: PORT] (0: any free port)",
    )
    a(
        "--api-key",
        default=os.environ.get("API_KEY"),  # as given: an empty key is refused, not read as "no auth"
        help="require `Authorization: Bearer <key>` on every inference route (all but /health, /ping and the "
        "operator routes, which take --admin-api-key only) [env: API_KEY]",
    )
    a(
        "--max-client-batch-size",
        type=int,
        default=int(env("MAX_CLIENT_BATCH_SIZE", default=4)),
        help="sequences one request may ask for (OpenAI's prompts x `n`) [env: MAX_CLIENT_BATCH_SIZE]",
    )
    a(
        "--payload-limit",
        type=int,
        default=int(env("PAYLOAD_LIMIT", default=2_000_000)),
        help="largest request body in bytes; larger: 413 [env: PAYLOAD_LIMIT]",
    )
    a(
        "--disable-grammar-support",
        action="store_true",
        default=_flag(env("DISABLE_GRAMMAR_SUPPORT", default="")),
        help="refuse `grammar`, `response_format` and `tools` with a 422 [env: DISABLE_GRAMMAR_SUPPORT]",
    )
    a(
        "--json-output",
        action="store_true",
        default=_flag(env("JSON_OUTPUT", default="")),
        help="log as JSON lines [env: JSON_OUTPUT]",
    )
    a(
        "--shutdown-timeout",
        "--graceful-termination-timeout",
        dest="shutdown_timeout",
        type=float,
        default=float(env("SHUTDOWN_TIMEOUT", "GRACEFUL_TERMINATION_TIMEOUT", default=30)),
        help="seconds in-flight requests get on SIGTERM before they are cancelled "
        "[env: SHUTDOWN_TIMEOUT, GRACEFUL_TERMINATION_TIMEOUT]",
    )
    a(
        "--trust-remote-code",
        action="store_true",
        default=_flag(env("TRUST_REMOTE_CODE", default="")),
        help="let a checkpoint's own code (auto_map: its config, tokenizer and, on the transformers "
        "fallback, model classes) run; without it such a checkpoint is refused. Native architectures "
        "always run tgi's model code [env: TRUST_REMOTE_CODE]",
    )
    add_production_arguments(parser)  # watermark and OpenTelemetry (issue 21)
    add_operator_arguments(parser)  # the admin key, model swap and run-time LoRA bounds
    add_tgi_arguments(parser)  # the rest of TGI's flags, served or refused by name


def _int(value) -> int | None:
    return None if value is None else int(value)


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
    """The engine's config from the flags; `ConfigError` names contradictory limits and why, or a TGI flag
    this server refuses."""
    check_tgi_arguments(args)
    for name in (
        "max_concurrent_requests",
        "max_best_of",
        "max_stop_sequences",
        "max_client_batch_size",
        "payload_limit",
    ):
        least = 0 if name == "max_stop_sequences" else 1
        if getattr(args, name) < least:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= {least}, got {getattr(args, name)}")
    if args.api_key is not None and not args.api_key.strip():
        raise ConfigError(
            "--api-key (or API_KEY) is empty: that would serve without authentication; "
            "give a key, or leave it unset to serve without one"
        )
    if args.max_top_n_tokens < 0:
        raise ConfigError(f"--max-top-n-tokens must be >= 0, got {args.max_top_n_tokens}")
    from tgi.server.lora import parse_lora_adapters

    kwargs = {}
    if args.max_batch_size is not None:
        kwargs["max_num_seqs"] = args.max_batch_size
    return EngineConfig(
        model_id=args.model_id,
        revision=args.revision,
        backend=args.backend,
        dtype=args.dtype,
        attention=args.attention,
        max_input_tokens=args.max_input_tokens,
        max_total_tokens=args.max_total_tokens,
        max_batch_prefill_tokens=args.max_batch_prefill_tokens,
        max_batch_total_tokens=args.max_batch_total_tokens,
        num_shard=args.num_shard,
        prefix_caching=args.prefix_caching,
        speculate=args.speculate,
        speculative_model=args.speculative_model,
        quantize=args.quantize,
        cuda_graphs=args.cuda_graphs,
        rope_scaling=rope_scaling(args),
        memory_fraction=args.cuda_memory_fraction,
        master_addr=args.master_addr,
        master_port=args.master_port,
        lora_adapters=parse_lora_adapters(args.lora_adapters),
        trust_remote_code=args.trust_remote_code,
        **operator_engine_settings(args),
        **kwargs,
    )


def server_settings(args: argparse.Namespace, on_ready=None) -> ServerSettings:
    return ServerSettings(
        max_concurrent_requests=args.max_concurrent_requests,
        max_best_of=args.max_best_of,
        max_stop_sequences=args.max_stop_sequences,
        max_top_n_tokens=args.max_top_n_tokens,
        max_client_batch_size=args.max_client_batch_size,
        payload_limit=args.payload_limit,
        api_key=args.api_key,
        disable_grammar_support=args.disable_grammar_support,
        enable_prefill_logprobs=args.enable_prefill_logprobs,
        cors_allow_origin=cors_origins(args),
        validation_workers=args.validation_workers,
        shutdown_grace_s=args.shutdown_timeout,
        allow_runtime_lora_updating=args.allow_runtime_lora_updating,
        on_ready=on_ready,
        **production_settings(args),
        **operator_settings(args),
    )


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
    host, port = sock.getsockname()[:2]
    where = f"http://{host}:{port}"
    ready = f"tgi serving {engine.model_id} on {where} (backend {engine.backend_name})"

    def on_ready() -> None:
        log.info(ready) if args.json_output else print(ready, flush=True)

    settings = server_settings(args, on_ready)
    # `serve` owns the engine from here: this frame must not hold it, or a model swap could never free the
    # start-up model (the list hands it over without a local left behind)
    handed_over = [engine]
    del engine
    return serve(handed_over.pop(), settings, sock)


def freeze_loaded_objects() -> None:
    """Collect the loading's garbage, then exempt every object alive now (the model, the tokenizer, the
    app) from garbage collection. Loading leaves ~0.9 million tracked objects, and each full collection
    traverses them all: a pause of hundreds of milliseconds, holding the GIL, so the engine thread and the
    event loop both stall mid-stream. Frozen, they are skipped; the requests' own objects are collected as
    before."""
    gc.collect()
    gc.freeze()


def serve(engine, settings: ServerSettings, sock: socket.socket) -> int:
    """Run uvicorn on an already bound socket until SIGTERM/SIGINT; returns 0 after a graceful stop, 1 when
    the engine died. The app's service holds the engine from then on (this frame drops it), so that a model
    swapped out is freed."""
    import uvicorn

    from tgi.server.app import create_app

    app = create_app(engine, settings)
    config = uvicorn.Config(
        app,
        log_config=None,
        timeout_graceful_shutdown=int(max(settings.shutdown_grace_s, 1)),
        timeout_keep_alive=5,
        access_log=False,
    )
    server = uvicorn.Server(config)
    if hasattr(engine, "on_death"):
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
    error = app.state.service.current_engine.error  # the first engine, or the one swapped in
    if error is not None:  # stopped because the engine died (e.g. a shard rank), not by request
        log.error("stopped: the engine died: %s: %s", type(error).__name__, error)
        return 1
    log.info("stopped")
    return 0
