"""Attention for the CUDA and ROCm backends, chosen by name (`--attention`, env `TGI_ATTENTION`).

* `triton` (default): the Triton kernels of `kernels/` (prefill, split-K decode, KV write). Batch-invariant
  (`--deterministic`): decode in one split, prefill as one decode row per query token
  (`kernels/invariant_prefill.py`).
* `flash-attn`, `flashinfer`: recognised names. Choosing one whose package does not import is an error
  naming the package; choosing one that imports is an error too, because these paths are not implemented
  yet (there was no GPU to test them on). Never a silent switch to another implementation.
"""

from __future__ import annotations

import importlib

import torch

from tgi.core.interfaces import AttentionCaps, AttentionLayerSpec, UnsupportedError
from tgi.core.torch.attention import AttentionBackend, AttentionMetadata
from tgi.core.torch.kv_cache import KVCache

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
MAX_HEAD_DIM = 256
#: meta.extra key: a fixed number of decode splits (CUDA graphs capture one launch shape)
NUM_SPLITS_KEY = "triton/num_decode_splits"

#: selectable names -> the package each needs (None: none beyond triton)
ATTENTION_IMPLS = {"triton": None, "flash-attn": "flash_attn", "flashinfer": "flashinfer"}
DEFAULT_ATTENTION = "triton"


class TritonAttention(AttentionBackend):
    """Paged attention in Triton: GQA, any head size up to 256 (padded to a power of two), float32,
    bfloat16 and float16, KV block sizes 1-256, sliding window, soft-cap, chunked prefill.

    :param min_tokens_per_split: decode splits a context into pieces of at least this many keys
    :param max_splits: at most this many decode splits (a power of two: split counts are, so that a few
        kernel variants serve every step and warm-up compiles them all, see `decode_split_choices`)
    :param target_programs: stop adding splits once batch * kv_heads * splits reaches this (the GPU is full)
    :param batch_invariant: `--deterministic`: a query's sum over its keys runs in one order, whatever the
        batch, the chunking or the cache: decode in one split (the split count otherwise follows the batch
        size and the longest context), prefill as one decode row per query token
        (`kernels.invariant_prefill`), so that a position prefilled and the same position decoded agree
    """

    name = "triton"

    def __init__(
        self,
        min_tokens_per_split: int = 256,
        max_splits: int = 16,
        target_programs: int = 256,
        batch_invariant: bool = False,
    ):
        if max_splits < 1 or max_splits & (max_splits - 1):
            raise ValueError(f"max_splits must be a power of two, got {max_splits}")
        self.min_tokens_per_split = min_tokens_per_split
        self.max_splits = max_splits
        self.target_programs = target_programs
        self.batch_invariant = batch_invariant

    def caps(self) -> AttentionCaps:
        return AttentionCaps(
            head_sizes=None,  # any size up to MAX_HEAD_DIM, see check()
            dtypes=("float32", "bfloat16", "float16"),
            block_sizes=BLOCK_SIZES,
            sliding_window=True,
            softcap=True,
            chunked_prefill=True,
        )

    def check(self, layer: AttentionLayerSpec, block_size: int, dtype: str) -> None:
        super().check(layer, block_size, dtype)
        if layer.head_dim > MAX_HEAD_DIM:
            raise UnsupportedError(
                f"attention '{self.name}' supports head sizes up to {MAX_HEAD_DIM}, got {layer.head_dim}"
            )

    def num_decode_splits(
        self, num_seqs: int, num_kv_heads: int, max_seq_len: int, window: int | None
    ) -> int:
        """How many programs share one sequence's context: enough to fill the GPU when the batch is small,
        none when each split would get fewer than `min_tokens_per_split` keys; rounded down to a power of
        two, so that it is one of `decode_split_choices()` (each is a kernel variant: a new count would
        compile while serving). Always 1 when batch-invariant."""
        if self.batch_invariant:
            return 1
        span = max_seq_len if window is None else min(max_seq_len, window)
        by_length = max(1, span // self.min_tokens_per_split)
        by_occupancy = max(1, self.target_programs // max(1, num_seqs * num_kv_heads))
        splits = int(min(self.max_splits, by_length, by_occupancy))
        return 1 << (splits.bit_length() - 1)

    def decode_split_choices(self) -> tuple[int, ...]:
        """Every split count `num_decode_splits` may return: the decode kernel variants warm-up compiles."""
        if self.batch_invariant:
            return (1,)
        return tuple(1 << i for i in range(self.max_splits.bit_length()))

    def prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: KVCache,
        layer_idx: int,
        meta: AttentionMetadata,
        layer: AttentionLayerSpec,
    ) -> torch.Tensor:
        from tgi.backends.triton_common.kernels import paged_prefill_attention

        key_cache, value_cache = kv_cache.layer(layer_idx)
        quant = _quantized(kv_cache, layer_idx)
        if self.batch_invariant:
            from tgi.backends.triton_common.kernels.invariant_prefill import prefill_as_decode_rows

            return prefill_as_decode_rows(
                q, key_cache, value_cache, meta.prefill_block_tables, meta.query_start_loc,
                meta.prefill_seq_lens, layer.scale, layer.sliding_window, layer.softcap, **quant,
            )  # fmt: skip
        return paged_prefill_attention(
            q, key_cache, value_cache,
            meta.prefill_block_tables, meta.query_start_loc, meta.prefill_seq_lens, meta.max_query_len,
            layer.scale, layer.sliding_window, layer.softcap, **quant,
        )  # fmt: skip

    def decode(
        self,
        q: torch.Tensor,
        kv_cache: KVCache,
        layer_idx: int,
        meta: AttentionMetadata,
        layer: AttentionLayerSpec,
    ) -> torch.Tensor:
        from tgi.backends.triton_common.kernels import paged_decode_attention

        key_cache, value_cache = kv_cache.layer(layer_idx)
        splits = meta.extra.get(NUM_SPLITS_KEY) or self.num_decode_splits(
            q.shape[0], key_cache.shape[2], meta.max_decode_seq_len, layer.sliding_window
        )
        if self.batch_invariant and splits != 1:  # graphs take theirs from num_decode_splits: 1
            raise ValueError(f"batch-invariant decode runs in one split, the step asks for {splits}")
        return paged_decode_attention(
            q, key_cache, value_cache, meta.decode_block_tables, meta.decode_seq_lens, layer.scale,
            num_splits=splits, sliding_window=layer.sliding_window, softcap=layer.softcap,
            **_quantized(kv_cache, layer_idx),
        )  # fmt: skip


def _quantized(kv_cache: KVCache, layer_idx: int) -> dict:
    """The kernels' `kv_scales` and `kv_kind` for a quantized cache's layer (none for one in the model's dtype)."""
    from tgi.backends.triton_common.kernels.kv_quant import KV_KINDS

    if not kv_cache.spec.quantized:
        return {}
    return {"kv_scales": kv_cache.scales(layer_idx), "kv_kind": KV_KINDS[kv_cache.spec.kv_dtype]}


def create_attention(name: str | None = None, **kwargs) -> AttentionBackend:
    """The attention implementation called `name` (default `triton`); raises `UnsupportedError` naming
    what is missing, never substituting another implementation. `kwargs` go to `TritonAttention`."""
    name = (name or DEFAULT_ATTENTION).strip().lower()
    if name not in ATTENTION_IMPLS:
        raise UnsupportedError(f"unknown attention '{name}' (known: {', '.join(ATTENTION_IMPLS)})")
    package = ATTENTION_IMPLS[name]
    if package is None:
        return TritonAttention(**kwargs)
    try:
        importlib.import_module(package)
    except ImportError as exc:
        raise UnsupportedError(
            f"attention '{name}' needs the '{package}' package, which does not import here ({exc}); "
            f"install it, or use --attention triton"
        ) from None
    raise UnsupportedError(
        f"attention '{name}' is recognised and '{package}' imports, but this version of tgi does not "
        f"implement it yet (it was never run on a GPU); use --attention triton"
    )


def one_split_backend(base: type) -> type:
    """A subclass of the backend class `base` whose Triton attention never splits a decode context
    (`max_splits=1`). For engines whose contexts are far below a split's minimum (256 keys) and so decode in
    one split anyway: their warm-up then runs that one decode variant instead of one per split count (1 to
    16, each a pass through every layer; most of a warm-up in Triton's interpreter). The split variants
    stay the kernel tests' to check."""

    class OneSplitBackend(base):
        def create_attention(self, name: str):
            attention = super().create_attention(name)
            if isinstance(attention, TritonAttention):
                attention.max_splits = 1
            return attention

    OneSplitBackend.__name__ = OneSplitBackend.__qualname__ = f"OneSplit{base.__name__}"
    return OneSplitBackend
