"""Engine configuration: the limits TGI's launcher takes, validated once (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tgi.core.interfaces.pooling import PoolingSpec
from tgi.core.interfaces.quantization import QUANTIZE_METHODS
from tgi.core.interfaces.types import KV_CACHE_DTYPES

if TYPE_CHECKING:
    from tgi.core.kv_events.events import KVEventsConfig


class ConfigError(ValueError):
    """Contradictory or out-of-range settings; the message names the settings and why."""


DEFAULT_MAX_LORAS = 8  # --max-loras: LoRA adapters served at once (static and run-time ones together)
DEFAULT_MAX_LORA_RANK = 64  # --max-lora-rank: the largest rank `r` of a served adapter
# --max-encoder-tokens-per-step: image placeholder tokens whose image one step may start encoding; one
# LLaVA-NeXT image at its largest tiling (2,928 tokens), or several 576-token LLaVA-1.5 images
DEFAULT_MAX_ENCODER_TOKENS_PER_STEP = 4096


@dataclass
class EngineConfig:
    model_id: str | None = None  # local folder, .gguf file, or hub id; None: the default model
    revision: str | None = None
    backend: str = "auto"
    dtype: str | None = None  # None: the backend's default
    # what the KV cache stores (--kv-cache-dtype, `tgi.core.interfaces.types.KV_CACHE_DTYPES`): "auto" the
    # model's dtype; "int8", "fp8_e4m3fn", "fp8_e5m2" one byte a value with a scale per token and kv head
    # (`KVCacheSpec.kv_dtype`); a backend that does not store it is refused at start, naming the flag
    kv_cache_dtype: str = "auto"
    attention: str | None = None  # attention implementation (`--attention`); None: the backend's default
    block_size: int = 16  # tokens per KV block
    max_input_tokens: int | None = None  # None: derived from the model's context length
    max_total_tokens: int | None = None  # prompt + generated, per request
    max_batch_prefill_tokens: int | None = None  # token budget of one step (chunked prefill)
    max_batch_total_tokens: int | None = None  # KV budget in tokens; None: from free memory at warm-up
    kv_cache_memory_fraction: float | None = (
        None  # of the free memory, when sizing from memory; None: backend's
    )
    max_num_seqs: int = 256  # sequences running at once
    # placeholder tokens of images not yet encoded that one step may start (the vision tower's work per step);
    # a request with one image larger than this is refused at validation
    max_encoder_tokens_per_step: int = DEFAULT_MAX_ENCODER_TOKENS_PER_STEP
    num_shard: int = 1  # tensor-parallel ranks (of each pipeline stage when pipeline_parallel_size > 1)
    # pipeline stages (--pipeline-parallel-size): the decoder layers split in contiguous stages, each
    # `num_shard` ranks wide; the group is `world_size` = num_shard × pipeline_parallel_size ranks
    pipeline_parallel_size: int = 1
    # reuse the KV blocks of prompts already seen (`--prefix-caching`, TGI's PREFIX_CACHING); the engine
    # turns it off for a runner that cannot prefill from the middle of a prompt (no chunked prefill)
    prefix_caching: bool = True
    # KV cache events in vLLM's format (`--kv-events-config`, `tgi.core.kv_events`): what enters and leaves the
    # prefix cache, published per step on ZMQ for routers; None: none recorded. Node 0's own (its engine
    # publishes): it does not travel to the other nodes of a group (`compare=False`: `tgi.core.parallel.wire`)
    kv_events: KVEventsConfig | None = field(default=None, compare=False)
    speculate: int = 0  # draft tokens verified per decode step (n-gram prompt lookup); 0: off
    speculative_model: str | None = None  # a draft model (same tokenizer) guesses instead of n-grams
    # weight quantization (TGI's --quantize values, `tgi.core.interfaces.quantization.QUANTIZE_METHODS`):
    # load-time for a dense checkpoint, or agreeing with a quantized checkpoint's quantization_config;
    # None: the checkpoint's own (dense, or as its quantization_config says)
    quantize: str | None = None
    # the seeds of requests that give none are drawn from a generator seeded with this; None: from the OS
    # (unseeded sampling differs from one start to the next), a number: the same draws at every start
    seed: int | None = None
    # TGI's launcher settings the engine acts on:
    # decode batch sizes to capture as graphs (--cuda-graphs); (): off; None: the backend's default
    cuda_graphs: tuple[int, ...] | None = None
    rope_scaling: tuple[str, float] | None = None  # ("linear" | "dynamic", factor) over the checkpoint's own
    # share of the device's total memory the server may use, weights included (--cuda-memory-fraction)
    memory_fraction: float = 1.0
    master_addr: str = "127.0.0.1"  # the shards' torch.distributed rendezvous (--master-addr)
    # None: a private file store on this host, or a free port of a non-loopback master_addr (--master-port)
    master_port: int | None = None
    # a group over several hosts: `num_shard` ranks in all, split evenly over `nnodes` hosts; this host is
    # node `node_rank` (0 serves HTTP and holds rank 0; the others run headless, `tgi.core.parallel.node`)
    nnodes: int = 1
    node_rank: int = 0
    # seconds a rank may take to join the group, and a collective may wait for a silent peer (--dist-timeout);
    # None: `tgi.core.parallel.topology.DEFAULT_DIST_TIMEOUT_S`
    dist_timeout_s: float | None = None
    # the file holding the secret the nodes of a group over several hosts share (--dist-secret-file; else the
    # variable TGI_DIST_SECRET holds it): required with nnodes > 1 (`tgi.core.parallel.dist_auth`)
    dist_secret_file: str | None = None
    # LoRA adapters served beside the model (--lora-adapters id=path,...): (id, PEFT adapter folder) pairs
    lora_adapters: tuple[tuple[str, str], ...] = ()
    max_loras: int = DEFAULT_MAX_LORAS  # adapters served at once, static and run-time ones (--max-loras)
    max_lora_rank: int = DEFAULT_MAX_LORA_RANK  # the largest rank `r` an adapter may have (--max-lora-rank)
    # --trust-remote-code (TRUST_REMOTE_CODE): a checkpoint's own config, tokenizer and (transformers
    # fallback only) model classes may run; without it such a checkpoint is refused at start naming the flag.
    # A native architecture runs tgi's model code whatever this says.
    trust_remote_code: bool = False
    # --deterministic (DETERMINISTIC): batch-invariant kernels, so that a request's tokens (greedy, or sampled
    # with a seed) are the same whatever else runs beside it; a backend without them is refused at start
    deterministic: bool = False
    # --async-scheduling: where the runner starts steps without waiting for the device
    # (`RunnerCapabilities.async_steps`), the engine schedules step N+1 and starts it before it settles step N
    # on the host (detokenization, stop checks, streaming); False: every step waits for the one before
    async_scheduling: bool = True
    # --logits-processors: the logits processors requests may select, by their entry-point names (group
    # `tgi.logits_processors`); each is loaded at start-up, and one that cannot be stops the start
    logits_processors: tuple[str, ...] = ()
    # --runner: what the model is served as: "generate", "pooling" (embeddings), or "auto" (pooling where the
    # folder has sentence-transformers' modules.json, `tgi.core.loading.pooling_config`)
    runner: str = "auto"
    # how a pooling model pools, resolved at start from the folder and --runner (None: a generative model)
    pooling: PoolingSpec | None = None

    def __post_init__(self) -> None:
        self.validate()

    @property
    def world_size(self) -> int:
        """Every rank of the group, all hosts together: tensor-parallel shards × pipeline stages."""
        return self.num_shard * self.pipeline_parallel_size

    def validate(self) -> None:
        """Raise `ConfigError` for contradictory limits; `None` limits are checked once they are derived."""
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise ConfigError(f"block size must be a positive power of two, got {self.block_size}")
        from tgi.core.parallel.topology import layout_problem

        if self.pipeline_parallel_size < 1:
            raise ConfigError(f"--pipeline-parallel-size must be >= 1, got {self.pipeline_parallel_size}")
        problem = layout_problem(self.world_size, self.nnodes, self.node_rank)
        if problem is not None:
            raise ConfigError(problem)
        if self.pipeline_parallel_size > 1:
            from tgi.core.parallel.stage_split import pipeline_config_problem

            problem = pipeline_config_problem(self)
            if problem is not None:
                raise ConfigError(problem)
        if self.dist_timeout_s is not None and not self.dist_timeout_s > 0:
            raise ConfigError(f"--dist-timeout must be a number of seconds > 0, got {self.dist_timeout_s}")
        if self.deterministic and self.num_shard > 1:
            raise ConfigError(
                f"--deterministic with --num-shard {self.num_shard}: a row-parallel layer adds the shards' "
                "partial products in an all-reduce, in another order than one shard sums them, so the "
                "outputs differ from one shard's (use --num-shard 1)"
            )
        if not 0 <= self.speculate <= 16:
            raise ConfigError(f"--speculate must be in [0, 16], got {self.speculate}")
        ids = [name for name, _ in self.lora_adapters]
        if len(set(ids)) != len(ids) or any(not name or name == "tgi" for name in ids):
            raise ConfigError(f"--lora-adapters ids must be unique, non-empty and not 'tgi', got {ids}")
        for flag, value in (("--max-loras", self.max_loras), ("--max-lora-rank", self.max_lora_rank)):
            if value < 1:
                raise ConfigError(f"{flag} must be >= 1, got {value}")
        if len(ids) > self.max_loras:
            raise ConfigError(
                f"--lora-adapters names {len(ids)} adapters, more than --max-loras {self.max_loras}"
            )
        if self.quantize is not None and self.quantize not in QUANTIZE_METHODS:
            raise ConfigError(
                f"--quantize {self.quantize}: unknown value (one of: {', '.join(QUANTIZE_METHODS)})"
            )
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError(
                f"--kv-cache-dtype {self.kv_cache_dtype}: unknown value (one of: {', '.join(KV_CACHE_DTYPES)})"
            )
        if len(set(self.logits_processors)) != len(self.logits_processors) or not all(self.logits_processors):
            raise ConfigError(
                f"--logits-processors names must be unique and non-empty, got {self.logits_processors}"
            )
        if self.max_num_seqs < 1:
            raise ConfigError(f"max number of sequences must be >= 1, got {self.max_num_seqs}")
        if self.max_encoder_tokens_per_step < 1:
            raise ConfigError(
                f"--max-encoder-tokens-per-step must be >= 1, got {self.max_encoder_tokens_per_step}"
            )
        if self.kv_cache_memory_fraction is not None and not 0 < self.kv_cache_memory_fraction <= 1:
            raise ConfigError("the KV-cache memory fraction must be in (0, 1]")
        if not 0 < self.memory_fraction <= 1:
            raise ConfigError(f"--cuda-memory-fraction must be in (0, 1], got {self.memory_fraction}")
        if self.rope_scaling is not None and (
            self.rope_scaling[0] not in ("linear", "dynamic") or self.rope_scaling[1] <= 0
        ):
            raise ConfigError(
                f"rope scaling must be linear or dynamic with a factor > 0, got {self.rope_scaling}"
            )
        for name in (
            "max_input_tokens",
            "max_total_tokens",
            "max_batch_prefill_tokens",
            "max_batch_total_tokens",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if self.max_input_tokens is not None and self.max_total_tokens is not None:
            if self.max_input_tokens >= self.max_total_tokens:
                raise ConfigError(
                    f"--max-input-tokens ({self.max_input_tokens}) must be < --max-total-tokens "
                    f"({self.max_total_tokens}): a request needs room for at least one generated token"
                )
        if self.max_total_tokens is not None and self.max_batch_total_tokens is not None:
            if self.max_total_tokens > self.max_batch_total_tokens:
                raise ConfigError(
                    f"--max-total-tokens ({self.max_total_tokens}) must be <= --max-batch-total-tokens "
                    f"({self.max_batch_total_tokens}): one request must fit in the KV cache"
                )
        if self.max_batch_prefill_tokens is not None and self.max_batch_total_tokens is not None:
            if self.max_batch_prefill_tokens > self.max_batch_total_tokens:
                raise ConfigError(
                    f"--max-batch-prefill-tokens ({self.max_batch_prefill_tokens}) must be <= "
                    f"--max-batch-total-tokens ({self.max_batch_total_tokens})"
                )
