"""Paged attention for Gaudi: a step's queries in rows, their context gathered from the paged cache by
block table, and Gaudi's fused SDPA (`HpuDevice.fused_sdpa`) under a causal / context-length / window mask.

Every shape is fixed by the step's bucket (rows, row length, block-table width), so one HPU graph or one
compiled recipe serves every step of that bucket. The runner (`runner.py`) hands the rows it padded in
`meta.extra[ROWS_KEY]`; for core's ragged metadata (the conformance suite calls `prepare`, `prefill` and
`decode` directly) `prepare` builds the same rows from it.

Not used: vllm-hpu-extension's `flat_pa` decode kernel, which TGI's Gaudi server calls; gathering the
context and running the fused SDPA is the path that can be checked here (its arithmetic on the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tgi.core.interfaces import AttentionCaps, AttentionLayerSpec
from tgi.core.torch.attention import AttentionBackend, AttentionMetadata

if TYPE_CHECKING:
    from tgi.backends.gaudi.device import HpuDevice
    from tgi.backends.gaudi.kv_cache import GaudiKVCache

#: meta.extra key: {"prefill": Rows | None, "decode": Rows | None}
ROWS_KEY = "gaudi/rows"
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class Rows:
    """The queries of the prefill part (or the decode part) of a step, as R rows of L positions."""

    token_index: torch.Tensor | None  # [R, L] int64 index into the part's flat tokens (T: padding); None:
    # the part's tokens are already rows (the runner's padded steps: T == R * L in row order)
    positions: torch.Tensor  # [R, L] int64 position of each query (padding: 0)
    block_tables: torch.Tensor  # [R, W] int64
    context_lens: torch.Tensor  # [R] int64 tokens of context after this step (padding rows: 0)


def rows_from_metadata(meta: AttentionMetadata) -> dict[str, Rows | None]:
    """Rows for core's ragged metadata: one row per prefill chunk (padded to the longest), one per decode
    query."""
    device = meta.slot_mapping.device
    i64 = dict(dtype=torch.int64, device=device)
    prefill = decode = None
    if meta.num_prefill_tokens:
        starts, ends = meta.prefill_start_pos, meta.prefill_seq_lens_host
        width = max(e - s for s, e in zip(starts, ends, strict=True))
        index, positions, at = [], [], 0
        for s, e in zip(starts, ends, strict=True):
            n = e - s
            index.append([at + j if j < n else meta.num_prefill_tokens for j in range(width)])
            positions.append([s + j if j < n else 0 for j in range(width)])
            at += n
        prefill = Rows(
            torch.tensor(index, **i64), torch.tensor(positions, **i64),
            meta.prefill_block_tables.to(torch.int64), meta.prefill_seq_lens.to(torch.int64),
        )  # fmt: skip
    if meta.num_decode_tokens:
        lens = meta.decode_seq_lens.to(torch.int64)
        decode = Rows(
            torch.arange(meta.num_decode_tokens, **i64)[:, None], (lens - 1)[:, None],
            meta.decode_block_tables.to(torch.int64), lens,
        )  # fmt: skip
    return {"prefill": prefill, "decode": decode}


class GaudiAttention(AttentionBackend):
    """Gathered paged context + Gaudi's fused SDPA; GQA, any head size, sliding window, chunked prefill;
    float32, bfloat16, float16. No soft-cap (the fused SDPA has none)."""

    name = "gaudi-sdpa"

    def __init__(self, device: HpuDevice) -> None:
        self.device = device

    def caps(self) -> AttentionCaps:
        return AttentionCaps(
            head_sizes=None, dtypes=("float32", "bfloat16", "float16"), block_sizes=BLOCK_SIZES,
            sliding_window=True, softcap=False, chunked_prefill=True,
        )  # fmt: skip

    def prepare(self, meta: AttentionMetadata) -> None:
        if ROWS_KEY not in meta.extra:
            meta.extra[ROWS_KEY] = rows_from_metadata(meta)

    def prefill(self, q, k, v, kv_cache, layer_idx, meta, layer):
        return self._attend(q, kv_cache, layer_idx, meta.extra[ROWS_KEY]["prefill"], layer)

    def decode(self, q, kv_cache, layer_idx, meta, layer):
        return self._attend(q, kv_cache, layer_idx, meta.extra[ROWS_KEY]["decode"], layer)

    def _attend(
        self, q: torch.Tensor, cache: GaudiKVCache, layer_idx: int, rows: Rows, layer: AttentionLayerSpec
    ) -> torch.Tensor:
        t, h, d = q.shape  # [T, H, D]
        r, length = rows.positions.shape
        if rows.token_index is None:
            q_rows = q.view(r, length, h, d)
        else:  # one zero row past the end for the padding positions
            q_rows = torch.cat([q, q.new_zeros(1, h, d)])[rows.token_index]
        key_blocks, value_blocks = cache.blocks(layer_idx)  # [N, bs, Hkv, D]
        hkv, width = key_blocks.shape[2], rows.block_tables.shape[1]
        span = width * key_blocks.shape[1]
        # [R, W, bs, Hkv, D] -> [R, Hkv, S, D], repeated to the query heads of each group
        k = key_blocks[rows.block_tables].reshape(r, span, hkv, d).transpose(1, 2)
        v = value_blocks[rows.block_tables].reshape(r, span, hkv, d).transpose(1, 2)
        if h != hkv:
            k, v = k.repeat_interleave(h // hkv, dim=1), v.repeat_interleave(h // hkv, dim=1)
        key_pos = torch.arange(span, device=q.device)
        pos = rows.positions[:, :, None]  # [R, L, 1]
        mask = (key_pos <= pos) & (key_pos < rows.context_lens[:, None, None])  # [R, L, S]
        if layer.sliding_window is not None:
            mask &= key_pos > pos - layer.sliding_window
        # padding rows and positions see no key: let them see slot 0, so that their output stays finite
        mask |= (key_pos == 0) & ~mask.any(dim=-1, keepdim=True)
        out = self.device.fused_sdpa(q_rows.transpose(1, 2), k, v, mask[:, None], layer.scale)  # [R, H, L, D]
        out = out.transpose(1, 2).to(q.dtype)  # [R, L, H, D]
        if rows.token_index is None:
            return out.reshape(t, h, d)
        flat = q.new_zeros(t + 1, h, d)
        flat.index_copy_(0, rows.token_index.reshape(-1), out.reshape(-1, h, d))
        return flat[:t]
