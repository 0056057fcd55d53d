"""Batch-invariant prefill attention (`--deterministic`): every query token of a prefill chunk is one row
of the decode kernel, with one split.

The tiled prefill kernel puts several query tokens in one tile and starts its key range where the tile
needs it, so a query's sum over its keys depends on how the prompt was chunked and on the tile it falls in;
the decode kernel with one split walks a row's keys from the oldest it may see (0, or its window's start)
in BLOCK_N tiles, in one online softmax. Running each query token as such a row (its context: the keys up to
and including its own position) gives it the order a decode step of the same position has: a token's
attention is the same whether its prompt came at once, in chunks, or after cached blocks, and the same as
if it had been decoded.
"""

from __future__ import annotations

import torch

from tgi.backends.triton_common.kernels.decode import paged_decode_attention


def prefill_as_decode_rows(
    q: torch.Tensor,  # [T, H, D]
    key_cache: torch.Tensor,  # [num_blocks, block_size, Hkv, D]
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [P, max_blocks] int32
    query_start_loc: torch.Tensor,  # [P + 1] int32
    seq_lens: torch.Tensor,  # [P] int32: context length after the chunk
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
    block_n: int | None = None,
    kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None,
    kv_kind: int = 0,
) -> torch.Tensor:  # [T, H, D]
    """Causal attention of every prefill chunk over its cached context and itself (both already in the
    cache), each query token computed as the one-split decode row of its position (a quantized cache's
    codes and scales as `paged_decode_attention` takes them)."""
    t = q.shape[0]
    num_seqs = query_start_loc.shape[0] - 1
    if t == 0 or num_seqs == 0:
        return torch.empty_like(q)
    starts = query_start_loc.to(torch.int64)
    q_lens = starts[1:] - starts[:-1]
    seq_of_token = torch.repeat_interleave(torch.arange(num_seqs, device=q.device), q_lens, output_size=t)
    # a token's context: the keys cached before its chunk, the chunk's tokens before it, and itself
    ctx_before_chunk = seq_lens.to(torch.int64) - q_lens
    index_in_chunk = torch.arange(t, device=q.device) - starts[:-1][seq_of_token]
    token_lens = (ctx_before_chunk[seq_of_token] + index_in_chunk + 1).to(torch.int32)
    token_tables = block_tables.index_select(0, seq_of_token)
    return paged_decode_attention(
        q, key_cache, value_cache, token_tables, token_lens, scale,
        num_splits=1, sliding_window=sliding_window, softcap=softcap, block_n=block_n, kv_scales=kv_scales,
        kv_kind=kv_kind,
    )  # fmt: skip
