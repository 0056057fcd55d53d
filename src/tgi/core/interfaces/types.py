"""Plain data that crosses the core <-> backend boundary (no framework here: no torch, no jax)."""

from __future__ import annotations

from dataclasses import dataclass

#: dtype names used across the boundary; torch backends map them with `tgi.core.dtypes`.
DTYPES = ("float32", "bfloat16", "float16")
#: what the KV cache stores (`--kv-cache-dtype`, TGI's values and int8): "auto" the model's dtype; the others one
#: byte a value with a float32 scale per token and kv head beside it (`KVCacheSpec.kv_dtype`)
KV_CACHE_DTYPES = ("auto", "fp8_e4m3fn", "fp8_e5m2", "int8")
#: bytes of the scale stored per token and kv head beside a quantized cache's values (float32)
KV_SCALE_BYTES = 4


class UnsupportedError(RuntimeError):
    """A backend cannot run what was asked (head size, dtype, feature); the message says why."""


@dataclass(frozen=True)
class ProbeResult:
    """Whether a backend can run on this machine. `reason` is shown to the user when it cannot."""

    available: bool
    reason: str = ""  # why not (or, when available, a short description of what was found)

    @classmethod
    def ok(cls, detail: str = "") -> ProbeResult:
        return cls(True, detail)

    @classmethod
    def unavailable(cls, reason: str) -> ProbeResult:
        return cls(False, reason)


@dataclass(frozen=True)
class DeviceInfo:
    """One device a backend can run on."""

    index: int
    name: str  # human-readable, e.g. "Intel(R) Xeon(R) ... (2 cores, AMX)" or "NVIDIA H100 80GB HBM3"
    total_memory: int  # bytes


@dataclass(frozen=True)
class MemoryInfo:
    """Device memory, read after the weights are loaded, to size the KV cache at warm-up."""

    total: int  # bytes
    free: int  # bytes that may be used for the KV cache and activations


@dataclass(frozen=True)
class AttentionCaps:
    """What an attention backend supports, so the engine can refuse a model it cannot run, with a reason."""

    head_sizes: tuple[int, ...] | None  # None: any head size
    dtypes: tuple[str, ...]
    block_sizes: tuple[int, ...]  # KV block sizes (tokens per block) it can use
    sliding_window: bool = False
    softcap: bool = False
    chunked_prefill: bool = True  # prefill chunks that attend to earlier cached pages
    # prefill spans whose tokens attend to each other both ways (`AttentionMetadata.prefill_bidirectional_spans`)
    bidirectional_spans: bool = False


@dataclass(frozen=True)
class AttentionLayerSpec:
    """The attention of one layer, as the model defines it."""

    num_heads: int  # query heads (per rank)
    num_kv_heads: int  # key/value heads (per rank); num_heads % num_kv_heads == 0 (grouped-query)
    head_dim: int
    scale: float  # softmax scale, usually head_dim ** -0.5
    sliding_window: int | None = None  # attend to at most this many most recent positions (incl. self)
    softcap: float | None = None  # logits -> softcap * tanh(logits / softcap)


@dataclass(frozen=True)
class KVCacheSpec:
    """Shape of the paged KV cache for one model (all layers)."""

    num_layers: int
    num_kv_heads: int  # per rank
    head_dim: int
    block_size: int  # tokens per block
    dtype: str  # the model's dtype: what attention computes in
    # what the cache stores (`KV_CACHE_DTYPES`): "auto" keys and values in `dtype`; "int8", "fp8_e4m3fn",
    # "fp8_e5m2" one byte a value and, beside each token's kv head, a float32 scale (value = code * scale),
    # written when the token is stored; the attention dequantizes on read
    kv_dtype: str = "auto"
    # the checkpoint's per-layer (k_scale, v_scale) of a float8 cache, one pair per layer of this spec (vLLM's
    # and llm-compressor's `self_attn.k_scale` / `v_scale`): each token is stored as value / scale, that scale
    # beside it. Empty: each token's scale is computed from its own values when it is written
    kv_scales: tuple[tuple[float, float], ...] = ()

    @property
    def quantized(self) -> bool:
        """Whether the cache stores one-byte codes and scales (any `kv_dtype` but "auto")."""
        return self.kv_dtype != "auto"

    @property
    def bytes_per_token_head(self) -> int:
        """Bytes one token's key (or value) of one kv head takes, its scale included."""
        if self.quantized:
            return self.head_dim + KV_SCALE_BYTES
        return self.head_dim * (4 if self.dtype == "float32" else 2)

    @property
    def bytes_per_block(self) -> int:
        # keys and values, every layer
        return 2 * self.num_layers * self.block_size * self.num_kv_heads * self.bytes_per_token_head

    def describe_kv(self) -> str:
        """The stored dtype for the start-up line and `/info`, e.g. "int8 (a float32 scale per token and kv
        head; 1.88x the tokens of bfloat16)" or "bfloat16"."""
        if not self.quantized:
            return self.dtype
        dense = self.head_dim * (4 if self.dtype == "float32" else 2)
        scales = "the checkpoint's k/v scales" if self.kv_scales else "a float32 scale per token and kv head"
        return (
            f"{self.kv_dtype} ({scales}; {dense / self.bytes_per_token_head:.2f}x the tokens of {self.dtype})"
        )


@dataclass(frozen=True)
class RunnerConstraints:
    """Shape constraints that a runner declares and the scheduler honours.

    Torch backends with dynamic shapes leave the defaults. Runners that compile whole graphs with static
    shapes (Neuron, TPU via JAX, Gaudi graphs) declare them: the scheduler never builds a batch they cannot
    run, and pads to what they need.
    """

    max_batch_size: int | None = None  # at most this many sequences per step (None: no limit)
    static_batch_size: bool = False  # batches are padded to max_batch_size by the runner
    prefill_buckets: tuple[int, ...] | None = None  # allowed prefill chunk lengths (padded up to a bucket)
    chunked_prefill: bool = True  # may split a prompt over steps (needs attention over cached pages)
    mixed_batches: bool = True  # prefill chunks and decode tokens may share one step
    block_size: int | None = None  # KV block size the runner requires (None: the engine's choice)
    # at most this many tokens per step, prefill chunks and decodes together (a static-shape runner's largest
    # token bucket); None: the engine's step budget alone
    max_batch_tokens: int | None = None
    # Prefill steps as padded rows `[B, L]` (a row layout such as Gaudi's): a prefill step's B is its number of
    # prefill chunks padded up to the smallest of these sizes (ascending; TGI Gaudi's PREFILL_BATCH_BUCKET_SIZE
    # multiples); None: B is the real count. L is its longest chunk padded up to `prefill_buckets` (the real
    # length when those are None). Alone this changes nothing; it sizes the area that the next field bounds.
    prefill_batch_buckets: tuple[int, ...] | None = None
    # at most this many padded tokens B x L per prefill step (TGI Gaudi's max_batch_prefill_tokens bounds its
    # padded prefill): the scheduler chunks or defers prompts to keep within it, and cuts a lone prompt's chunk
    # to the largest L that fits, so every prompt progresses. Decode tokens of a mixed step are not counted.
    # None: only the real tokens are bounded (max_batch_tokens and the engine's step budget)
    max_padded_prefill_tokens: int | None = None
    # an image's placeholder tokens are fed in one prefill chunk, never split across chunks nor across the end of
    # a cached prefix (a model whose image tokens attend to each other both ways at prefill, Gemma 3): a chunk
    # that would split one is cut before it, the prefix cache's reuse stops before it, and a prompt whose image
    # exceeds the longest chunk is refused
    atomic_images: bool = False

    def padded_prefill_tokens(self, num_rows: int, longest: int) -> int | None:
        """B x L of a prefill step of `num_rows` chunks whose longest has `longest` tokens, each padded up to
        its bucket (the fields above); None when one exceeds its largest bucket (no such step can run)."""
        rows = _fit(self.prefill_batch_buckets, num_rows)
        length = _fit(self.prefill_buckets, longest)
        return None if rows is None or length is None else rows * length

    def prefill_room(self, num_rows: int, longest: int) -> int | None:
        """The longest chunk that a prefill step of `num_rows` chunks (the longest `longest` tokens) may add
        as one more row and stay within `max_padded_prefill_tokens`: 0 when no chunk fits; None when that
        bound is not set."""
        if self.max_padded_prefill_tokens is None:
            return None
        rows = _fit(self.prefill_batch_buckets, num_rows + 1)
        if rows is None:
            return 0
        cap = self.max_padded_prefill_tokens // rows
        if self.prefill_buckets is not None:  # the largest bucket within the cap: chunks up to it pad to it
            cap = max((s for s in self.prefill_buckets if s <= cap), default=0)
        padded_longest = _fit(self.prefill_buckets, longest) if longest else 0
        return cap if padded_longest is not None and padded_longest <= cap else 0


def _fit(sizes: tuple[int, ...] | None, n: int) -> int | None:
    """The smallest of ascending `sizes` that holds `n` (`n` itself when `sizes` is None; None above them)."""
    if sizes is None:
        return n
    return next((s for s in sizes if s >= n), None)


@dataclass(frozen=True)
class RunnerCapabilities:
    """Features beyond the plain contract that a runner states it has; the engine refuses a request that
    needs one it lacks, naming it."""

    token_masks: bool = False  # applies grammar masks when sampling (guided decoding)
    # speculative decoding: samples every position of a chunk with `num_draft_tokens` (one StepOutput row per
    # position, `ScheduledSequence.draft_rows`); the chunk is fed as a prefill chunk over cached context
    draft_verification: bool = False
    medusa_heads: int = 0  # Medusa heads loaded with the model: their guesses come with each sampled row
    # returns `StepOutput.prompt_logprobs` for prefill chunks that want them (TGI's decoder_input_details);
    # a runner that cannot (a compiled context encoding that yields the last position only) says False
    prompt_logprobs: bool = True
    # with them, each prompt token's rank and its position's top-n tokens (`StepOutput.prompt_ranks`, vLLM's
    # `prompt_logprobs`) for sequences whose `sampling.prompt_top_n_tokens` is set; False: refused by name
    prompt_top_logprobs: bool = False
    # loads and unloads LoRA adapters between steps (`ModelRunner.load_lora_adapter`, run-time LoRA loading)
    lora_runtime_loading: bool = False
    # batch-invariant (`--deterministic`): each sequence's logits and sampled tokens depend only on its own
    # tokens, parameters and seed, never on how many sequences share its steps, where it sits among them, how
    # its prompt was chunked, whether its prefix came from the prefix cache, or the thread count; True only
    # when the runner runs in that mode (`Backend.use_batch_invariant_kernels`), else the engine refuses
    # `EngineConfig.deterministic` by name
    batch_invariant: bool = False
    # runs the model's vision tower on a request's images (`EngineRequest.images`, `ImageInput`) at prefill and
    # puts its output in place of the placeholder tokens' embeddings; False: validation refuses an image by name
    image_inputs: bool = False
    # overlapped steps (`ModelRunner.execute_async`): the runner starts a step and returns before the device has
    # run it, so that the engine settles the previous step on the host meanwhile; it takes a decode whose token
    # is `PENDING_TOKEN` (the token it sampled for that request in the step before, still on the device)
    async_steps: bool = False
    # the `SamplingParams` fields its sampler does not honour (the later samplers: "min_p", "top_n_sigma",
    # "dry_multiplier", "xtc_probability", "bad_words_ids", "allowed_token_ids", "logits_processors"...): a
    # request that sets one to anything but its default is refused, naming it, never sampled without it
    unsupported_sampling: frozenset[str] = frozenset()
    # runs a pooling model (`EngineConfig.pooling`): returns `StepOutput.pooled` for sequences with
    # `ScheduledSequence.pool`; False: the engine refuses to start a pooling model on it, naming the backend
    pooling: bool = False
    # with `pooling`: returns `StepOutput.token_embeddings` (every token's final hidden state, unpooled) for
    # sequences with `ScheduledSequence.token_embeddings`; False: validation refuses such a request by name
    token_embeddings: bool = False
