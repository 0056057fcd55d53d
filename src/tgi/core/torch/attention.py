"""Attention over ragged prompt chunks and paged decode: the part of core's torch models a torch backend
implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tgi.core.interfaces.types import AttentionCaps, AttentionLayerSpec, UnsupportedError

if TYPE_CHECKING:
    import torch

    from tgi.core.torch.kv_cache import KVCache

__all__ = ["AttentionBackend", "AttentionLayerSpec", "AttentionMetadata", "UnsupportedError"]


@dataclass
class AttentionMetadata:
    """Where each token of a step reads and writes keys/values. Built once per step by the runner from the
    `ScheduledBatch` and shared by every layer. Prefill tokens come first on the flat token axis, then one
    token per decoding sequence. Block tables are padded with 0 on the right."""

    slot_mapping: torch.Tensor  # [T] int64: cache slot of each new token's key/value
    num_prefill_tokens: int  # tokens [0, num_prefill_tokens) belong to prefill chunks
    num_decode_tokens: int  # tokens [num_prefill_tokens, T) are decode queries, each with its own length and
    # block table (a sequence verifying guesses has one query per fed token, lengths growing by one)
    # prefill chunks (P sequences)
    query_start_loc: torch.Tensor  # [P+1] int32: cumulative chunk lengths
    prefill_seq_lens: torch.Tensor  # [P] int32: context length after this step (start_pos + chunk length)
    prefill_block_tables: torch.Tensor  # [P, max_blocks] int32
    max_query_len: int  # longest chunk
    max_prefill_seq_len: int  # longest context among prefills
    # decodes (D sequences)
    decode_seq_lens: torch.Tensor  # [D] int32: context length including the new token
    decode_block_tables: torch.Tensor  # [D, max_blocks] int32
    max_decode_seq_len: int
    # host-side copies, so that backends need no device->host sync to read them
    prefill_start_pos: list[int] = field(default_factory=list)  # [P] tokens already cached per chunk
    prefill_seq_lens_host: list[int] = field(default_factory=list)  # [P]
    decode_seq_lens_host: list[int] = field(default_factory=list)  # [D]
    # [P] per prefill chunk, position runs [lo, hi) inside it whose tokens attend to each other both ways (an
    # image's placeholders in Gemma 3); the rest stays causal. Empty: causal only. Set by the runner for a model
    # that asks (`bidirectional_images`) on an attention whose caps allow it (`AttentionCaps.bidirectional_spans`)
    prefill_bidirectional_spans: list[list[tuple[int, int]]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # backend-private data from `prepare`


class AttentionBackend(ABC):
    """Paged attention kernels for one backend.

    Contract: before a layer's attention runs, the model writes the step's new keys/values to the cache
    (`KVCache.write` at `meta.slot_mapping`); `prefill` and `decode` then read the context from the cache
    (plus the new `k`/`v` for prefill chunks) and return the attention output. Attention is causal, with
    grouped-query heads, the layer's scale, and its sliding window and soft-cap when the caps allow them.
    """

    name: str = "attention"

    @abstractmethod
    def caps(self) -> AttentionCaps:
        """What this attention supports."""

    def check(self, layer: AttentionLayerSpec, block_size: int, dtype: str) -> None:
        """Raise `UnsupportedError` naming the reason if this backend cannot run `layer`."""
        caps = self.caps()
        if caps.head_sizes is not None and layer.head_dim not in caps.head_sizes:
            raise UnsupportedError(
                f"attention '{self.name}' does not support head size {layer.head_dim} "
                f"(supported: {', '.join(map(str, caps.head_sizes))})"
            )
        if dtype not in caps.dtypes:
            raise UnsupportedError(
                f"attention '{self.name}' does not support dtype {dtype} (supported: {', '.join(caps.dtypes)})"
            )
        if block_size not in caps.block_sizes:
            raise UnsupportedError(
                f"attention '{self.name}' does not support KV block size {block_size} "
                f"(supported: {', '.join(map(str, caps.block_sizes))})"
            )
        if layer.sliding_window is not None and not caps.sliding_window:
            raise UnsupportedError(f"attention '{self.name}' does not support sliding-window attention")
        if layer.softcap is not None and not caps.softcap:
            raise UnsupportedError(f"attention '{self.name}' does not support attention logit soft-capping")

    def prepare(self, meta: AttentionMetadata) -> None:  # noqa: B027 - optional hook
        """Called once per step before the first layer; may add backend data to `meta.extra`."""

    @abstractmethod
    def prefill(
        self,
        q: torch.Tensor,  # [Tp, num_heads, head_dim]
        k: torch.Tensor,  # [Tp, num_kv_heads, head_dim] (already written to the cache)
        v: torch.Tensor,  # [Tp, num_kv_heads, head_dim]
        kv_cache: KVCache,
        layer_idx: int,
        meta: AttentionMetadata,
        layer: AttentionLayerSpec,
    ) -> torch.Tensor:  # [Tp, num_heads, head_dim]
        """Causal attention of each prefill chunk over its cached context (positions < start_pos) and
        itself."""

    @abstractmethod
    def decode(
        self,
        q: torch.Tensor,  # [D, num_heads, head_dim]
        kv_cache: KVCache,
        layer_idx: int,
        meta: AttentionMetadata,
        layer: AttentionLayerSpec,
    ) -> torch.Tensor:  # [D, num_heads, head_dim]
        """Attention of one new token per sequence over its whole paged context."""
