"""Engine start-up: select the backend, load the model (and the draft model), size the KV cache, warm up.

`start_engine(config)` returns the parts `LLMEngine` is built from (`EngineParts`); `LLMEngine.from_config`
is its one caller in the server. `derive_limits` fills in the limits the user left unset, as TGI does.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tgi.core.config import ConfigError, EngineConfig
from tgi.core.interfaces import Backend, ModelInfo, ModelRunner, RunnerConstraints, UnsupportedError
from tgi.core.speculative import DraftModelProposer, MedusaProposer, NgramProposer, Proposer

log = logging.getLogger(__name__)

#: default step token budget cap: a longer prompt is chunked over steps so running decodes keep going
DEFAULT_MAX_BATCH_PREFILL_TOKENS = 2048


@dataclass(frozen=True)
class EngineParts:
    """What `LLMEngine` is built from: a started backend, a loaded and warmed-up runner with its KV cache,
    the tokenizer, the config with every limit derived (`derive_limits`), and the draft model's proposer
    (`--speculative-model`; None: the engine picks the proposer `--speculate` asks for)."""

    backend: Backend
    runner: ModelRunner
    tokenizer: Any  # the model's tokenizer (transformers' or the GGUF file's)
    config: EngineConfig
    info: ModelInfo
    proposer: Proposer | None = None


def derive_limits(
    config: EngineConfig,
    info: ModelInfo,
    runner: ModelRunner,
    backend: Backend,
    draft: ModelRunner | None = None,
) -> EngineConfig:
    """Fill in the limits the user left unset, from the model and the device's free memory, as TGI does,
    and check that they agree with each other. Returns a new config with no `None` limit left.

    `draft`: the draft model's runner (`--speculative-model`, weights loaded), whose KV cache holds as many
    tokens as the target's: the memory budget is divided by the two caches' bytes per block together, so
    target and draft caches fit in it side by side."""
    context = info.max_position_embeddings
    max_total = config.max_total_tokens or context
    if max_total > context:
        raise ConfigError(
            f"--max-total-tokens ({max_total}) exceeds the model's context length ({context} positions)"
        )
    max_input = config.max_input_tokens or max_total - 1
    prefill = config.max_batch_prefill_tokens or min(max_input + 50, DEFAULT_MAX_BATCH_PREFILL_TOKENS)
    bytes_per_block = runner.kv_cache_spec().bytes_per_block
    if draft is not None:
        bytes_per_block += draft.kv_cache_spec().bytes_per_block
    bs = config.block_size
    if config.max_batch_total_tokens is not None:
        num_blocks = -(-config.max_batch_total_tokens // bs)
    else:
        # the runner's view where it has one (several devices: the least free), else the backend's
        memory = runner.memory_info() or backend.memory_info()
        # --cuda-memory-fraction: what is used already counts against the share of the total allowed
        allowed = memory.free - memory.total * (1.0 - config.memory_fraction)
        free = max(allowed, 0) * config.kv_cache_memory_fraction
        # never more than every running sequence at full length could use
        num_blocks = int(min(free // bytes_per_block, config.max_num_seqs * -(-max_total // bs)))
    if num_blocks * bs < max_total:
        raise ConfigError(
            f"the KV cache holds {num_blocks * bs} tokens ({num_blocks} blocks of {bs}), less than "
            f"--max-total-tokens ({max_total}): lower --max-total-tokens or free memory"
        )
    return dataclasses.replace(
        config,
        dtype=info.dtype,
        max_total_tokens=max_total,
        max_input_tokens=max_input,
        max_batch_prefill_tokens=prefill,
        max_batch_total_tokens=num_blocks * bs,
    )


def load_draft_runner(
    backend: Backend, config: EngineConfig, info: ModelInfo, say: Callable[[str], None]
) -> ModelRunner:
    """`--speculative-model`: the draft model loaded on the same backend (one process), its KV cache not
    yet made (`start_draft`); refused when it cannot guess the target's tokens (another vocabulary)."""
    from tgi.core.loading import resolve_model

    if not config.speculate:
        raise ConfigError("--speculative-model needs --speculate N (the guesses per step)")
    source = resolve_model(config.speculative_model, trust_remote_code=config.trust_remote_code)
    # the target's LoRA adapters do not fit the draft: it guesses with its base weights (verification keeps
    # the output the adapter's)
    draft_config = dataclasses.replace(
        config, model_id=config.speculative_model, revision=None, num_shard=1, speculative_model=None,
        lora_adapters=(),
    )  # fmt: skip
    runner = backend.create_runner(source, draft_config, 1)
    draft = runner.load()
    if draft.vocab_size != info.vocab_size:
        runner.shutdown()
        raise ConfigError(
            f"--speculative-model {config.speculative_model}: its vocabulary ({draft.vocab_size} tokens) is "
            f"not the model's ({info.vocab_size}): guesses must be the model's tokens"
        )
    say(f"draft model: {draft.architecture}, {draft.num_parameters / 1e6:.0f}M parameters")
    return runner


def start_draft(runner: ModelRunner, config: EngineConfig) -> DraftModelProposer:
    """The draft model's proposer, its KV cache made with as many tokens as the target's
    (`config.max_batch_total_tokens`, from `derive_limits(..., draft=runner)`)."""
    num_blocks = config.max_batch_total_tokens // config.block_size
    runner.initialize_cache(num_blocks)
    return DraftModelProposer(runner, num_blocks, config.block_size)


def choose_proposer(
    config: EngineConfig, runner: ModelRunner, constraints: RunnerConstraints
) -> Proposer | None:
    """The proposer `--speculate` asks for (none without it), or `ConfigError` naming what the runner
    lacks. The draft model's (`--speculative-model`) is made by `start_engine`, not here."""
    if not config.speculate:
        return None
    missing = [
        what
        for what, ok in (
            ("verification of several tokens per sequence", runner.capabilities().draft_verification),
            ("chunked prefill", constraints.chunked_prefill),
            ("mixed batches", constraints.mixed_batches),
        )
        if not ok
    ]
    if missing:
        raise ConfigError(f"--speculate {config.speculate}: this backend's runner lacks {', '.join(missing)}")
    if config.speculative_model:
        raise ConfigError("--speculative-model: the draft model is loaded by LLMEngine.from_config")
    if runner.capabilities().medusa_heads:
        return MedusaProposer()
    return NgramProposer()


def start_backend(config: EngineConfig, registry, say: Callable[[str], None]) -> tuple[Backend, EngineConfig]:
    """Select and create the backend, apply `--attention`, the dtype and `--deterministic`, and check
    `--cuda-graphs`; returns it with the config's dtype and KV memory fraction filled in."""
    from tgi.core.plugins import BackendRegistry

    spec = (registry or BackendRegistry()).select(config.backend)
    backend = spec.create()
    backend.spec = spec  # how a backend that runs ranks in other processes builds them
    if config.attention:
        backend.select_attention(config.attention)
    dtype = config.dtype or backend.default_dtype()
    backend.check_dtype(dtype)
    why = "" if config.dtype else backend.default_dtype_reason()
    fraction = config.kv_cache_memory_fraction or backend.kv_cache_memory_fraction
    config = dataclasses.replace(config, dtype=dtype, kv_cache_memory_fraction=fraction)
    dtype_note = f"dtype {dtype} (the default: {why})" if why else f"dtype {dtype}"
    if config.deterministic:  # before the runner picks its kernels
        try:
            backend.use_batch_invariant_kernels(dtype)
        except UnsupportedError as e:
            raise ConfigError(f"--deterministic: {e}") from e
    if config.kv_cache_dtype != "auto":  # after the kernels are chosen: they decide what is read
        try:
            backend.check_kv_cache_dtype(config.kv_cache_dtype, dtype)
        except UnsupportedError as e:
            raise ConfigError(f"--kv-cache-dtype {config.kv_cache_dtype}: {e}") from e
    attention = backend.attention_in_use()
    say(f"backend: {spec.name} ({backend.devices()[0].name}), {dtype_note}, attention {attention}")
    if config.deterministic:
        say(
            "deterministic mode on: batch-invariant kernels, a request's tokens do not depend on what "
            "runs beside it (--deterministic)"
        )
    if config.cuda_graphs and not backend.captures_graphs:
        raise ConfigError(
            f"--cuda-graphs: the {spec.name} backend does not capture graphs (give 0, or omit it)"
        )
    return backend, config


def _check_loaded(config: EngineConfig, info: ModelInfo, backend_name: str, runner: ModelRunner) -> None:
    """Refuse a runner that ignored `--lora-adapters` or `--quantize`, or cannot pool a pooling model."""
    if config.pooling is not None and not runner.capabilities().pooling:
        raise ConfigError(
            f"{info.architecture} is a pooling model ({config.pooling.source}): the {backend_name} backend's "
            "runner cannot pool (RunnerCapabilities.pooling)"
        )
    wanted = tuple(name for name, _ in config.lora_adapters)
    if info.lora_adapters != wanted:
        raise ConfigError(
            f"--lora-adapters: the {backend_name} backend's runner does not serve LoRA adapters"
        )
    if config.quantize and info.quantization is None:
        raise ConfigError(
            f"--quantize {config.quantize}: the {backend_name} backend's runner loaded no quantized weights"
        )


def _with_pooling(config: EngineConfig, source: Any, say: Callable[[str], None]) -> EngineConfig:
    """`config` with the model's pooling spec (`--runner`, the folder's sentence-transformers modules)."""
    from tgi.core.loading import load_config
    from tgi.core.loading.pooling_config import read_pooling

    folder = source.path if source.format == "safetensors" else None
    hf_config = load_config(source) if folder or config.runner == "pooling" else None
    spec = read_pooling(folder, config.runner, hf_config)
    if spec is None:
        return config
    norm = ", normalized" if spec.normalize else ""
    say(f"pooling model: {spec.mode} pooling{norm}, {spec.dimension} dims (from {spec.source})")
    return dataclasses.replace(config, pooling=spec)


def start_engine(
    config: EngineConfig, registry=None, progress: Callable[[str], None] | None = None
) -> EngineParts:
    """Select the backend, resolve and load the model (and `--speculative-model`'s draft), size the KV
    cache(s) from the memory left, warm up. `progress` gets one line per stage (default: the log)."""
    from tgi.core.loading import resolve_model
    from tgi.core.plugins.logits_processors import logits_processors
    from tgi.core.tokenization import load_tokenizer

    say = progress or (lambda msg: log.info(msg))
    if config.logits_processors:  # before anything heavy: a processor that cannot load stops the start
        enabled = logits_processors().enable(config.logits_processors)
        say(f"logits processors: {', '.join(enabled)}")
    backend, config = start_backend(config, registry, say)
    dtype = config.dtype  # the computing dtype asked for (`derive_limits` records the model's)
    source = resolve_model(config.model_id, config.revision, config.trust_remote_code)
    if config.rope_scaling is not None:  # every rank loads its config from the source
        source = dataclasses.replace(source, rope_scaling=config.rope_scaling)
    say(f"model: {source.model_id} ({source.format}: {source.path})")
    t0 = time.perf_counter()
    tokenizer = load_tokenizer(source)
    # --num-shard (× --pipeline-parallel-size): the backend decides how its devices share the model (torch
    # backends: one process per rank, tensor-parallel layers, pipeline stages of layers)
    _check_pipeline_backend(config, backend)
    config = _with_pooling(config, source, say)
    runner = backend.create_runner(source, config, config.world_size)
    draft: ModelRunner | None = None
    try:
        info = runner.load()
        _check_loaded(config, info, backend.spec.name, runner)
        info = dataclasses.replace(info, pooling=config.pooling)
        if info.quantization is not None:
            q = info.quantization
            say(f"quantization: {q.description}: {q.num_linears} linears on {q.kernel}")
        say(
            f"weights loaded: {info.architecture}, {info.num_parameters / 1e6:.0f}M parameters in {time.perf_counter() - t0:.1f}s"
        )
        if config.speculative_model:  # its weights before the KV caches, which share what memory is left
            draft = load_draft_runner(backend, config, info, say)
        config = derive_limits(config, info, runner, backend, draft)
        runner.initialize_cache(config.max_batch_total_tokens // config.block_size)
        proposer = None if draft is None else start_draft(draft, config)
        beside = "" if draft is None else ", as many for the draft model"
        stored = runner.kv_cache_spec().describe_kv()
        say(
            f"KV cache: {config.max_batch_total_tokens} tokens in {stored}{beside}; max input "
            f"{config.max_input_tokens}, max total {config.max_total_tokens}, step budget "
            f"{config.max_batch_prefill_tokens} tokens"
        )
        t0 = time.perf_counter()
        runner.warmup(config.max_batch_prefill_tokens, config.max_num_seqs)
        say(f"warm-up done in {time.perf_counter() - t0:.1f}s")
        kernels = backend.describe_kernels(dtype)
        if kernels:
            say("kernels: " + "; ".join(f"{name} {impl}" for name, impl in kernels.items()))
    except BaseException:
        runner.shutdown()  # tensor parallel: stops the worker processes
        if draft is not None:
            draft.shutdown()
        raise
    return EngineParts(backend, runner, tokenizer, config, info, proposer)


def _check_pipeline_backend(config: EngineConfig, backend: Any) -> None:
    """Pipeline stages are built by core's torch rank runner: a backend that brings its own runner would
    run the whole model on every rank, so it is refused by name."""
    if config.pipeline_parallel_size == 1:
        return
    maker = getattr(type(backend), "create_rank_runner", None)
    if getattr(maker, "__qualname__", "") != "TorchBackend.create_rank_runner":
        raise ConfigError(
            f"--pipeline-parallel-size {config.pipeline_parallel_size}: backend '{backend.spec.name}' brings "
            "its own model runner, which does not split the layers in stages (core's torch runner does: cpu)"
        )


def start_kv_events(config: EngineConfig, block_manager, lora) -> Any:
    """The engine's KV event stream (`tgi.core.kv_events.stream.KVEventStream`) when `--kv-events-config`
    enables events, else None; `lora`: the engine's `ServedAdapters` (the adapters' ids in the events). The
    events are the prefix cache's, so they need it on: refused by name when it is off (`--prefix-caching
    false`, or a runner without chunked prefill)."""
    events = config.kv_events
    if events is None or not events.enable_kv_cache_events:
        return None
    if not config.prefix_caching:
        raise ConfigError(
            "--kv-events-config: KV events report the prefix cache's blocks, and prefix caching is off "
            "(--prefix-caching false, or this backend's runner cannot prefill from the middle of a prompt)"
        )
    from tgi.core.kv_events.events import lora_event_id
    from tgi.core.kv_events.stream import KVEventStream

    def lora_id_of(seq) -> int | None:
        adapter = seq.params.adapter_id
        return None if adapter is None else lora_event_id(lora.cache_key(adapter))

    return KVEventStream(events, block_manager, lora_id_of)
