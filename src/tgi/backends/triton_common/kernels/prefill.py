"""Prefill and chunked prefill of ragged sequences over the paged cache (causal, GQA, window, soft-cap).

One program per (sequence, tile of BLOCK_M query tokens, kv head). The tile's rows are (token, query head
of the group) pairs, BLOCK_M * BLOCK_G of them, so that the G query heads sharing a kv head are one `tl.dot`
against each key tile. The chunk's own keys/values were written to the cache before the call (the
`AttentionBackend` contract), so the kernel reads the whole context — earlier pages (chunked prefill, and
prefix caching later) and the chunk itself — from the cache through the block table: one code path.
Keys run from the oldest any row of the tile may see (0, or the sliding window's start) to the tile's last
query position; the causal and window masks are applied per row, online softmax as in flash-attention.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tgi.backends.triton_common.kernels.common import (
    block_d,
    block_n_for,
    pv_dot,
    qk_dot,
    shared_memory_budget,
    softcap_fn,
    tile_launch_options,
    upcast_dot,
)
from tgi.backends.triton_common.kernels.kv_quant import load_kv

#: (query token, head) rows per tile, at most: fewer for wide heads (`prefill_block_rows`)
BLOCK_ROWS = 64


def prefill_block_rows(head_dim: int, dtype: torch.dtype) -> int:
    """Rows per tile: 64, fewer where a row's query and accumulator are wide (heads over 128; over 64 when
    the dot runs in float32), which 8 warps otherwise spill (ptxas -v, sm_90)."""
    elements = 4096 if upcast_dot(dtype) else 8192
    return max(16, min(BLOCK_ROWS, elements // block_d(head_dim)))


# the block table's width changes from step to step, and the metadata tensors are views at any offset of one
# packed copy (`build_attention_metadata`): neither is a specialisation (a new variant) of its own
@triton.jit(
    do_not_specialize=["stride_bt"],
    do_not_specialize_on_alignment=["Block_tables", "Query_start", "Seq_lens"],
)
def _prefill_kernel(
    Q,  # [T, H, D]
    K_cache,  # [num_blocks, PAGE, Hkv, D] (a quantized cache: its codes, uint8)
    V_cache,
    K_scale,  # [num_blocks, PAGE, Hkv] float32: a quantized cache's scales (KV_KIND > 0)
    V_scale,
    Out,  # [T, H, D]
    Block_tables,  # [P, max_blocks] int32
    Query_start,  # [P + 1] int32
    Seq_lens,  # [P] int32: context length after the chunk
    scale,
    softcap,
    window,
    stride_qt,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_bt,
    G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query tokens per tile
    BLOCK_G: tl.constexpr,  # next power of two >= G
    BLOCK_N: tl.constexpr,
    PAGE: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
    UPCAST: tl.constexpr,
    KV_KIND: tl.constexpr = 0,  # `kv_quant.KV_KINDS`: 0 the model's dtype, else codes and scales
):
    i = tl.program_id(0)
    mt = tl.program_id(1)
    kh = tl.program_id(2)
    q_start = tl.load(Query_start + i)
    q_len = tl.load(Query_start + i + 1) - q_start
    seq_len = tl.load(Seq_lens + i)
    ctx_len = seq_len - q_len  # tokens cached before this chunk

    offs_r = tl.arange(0, BLOCK_M * BLOCK_G)
    tok = mt * BLOCK_M + offs_r // BLOCK_G
    g = offs_r % BLOCK_G
    r_mask = (tok < q_len) & (g < G)
    heads = kh * G + g
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    d_mask = offs_d < HEAD_DIM
    q = tl.load(
        Q + (q_start + tok)[:, None] * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
        mask=r_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    q_pos = ctx_len + tok

    first_tok = mt * BLOCK_M
    last_tok = tl.minimum(q_len, first_tok + BLOCK_M) - 1
    lo = 0
    if USE_WINDOW:
        lo = tl.maximum(ctx_len + first_tok - window + 1, 0)
    hi = tl.where(first_tok < q_len, ctx_len + last_tok + 1, lo)  # empty range for a tile past the chunk

    m_i = tl.full([BLOCK_M * BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M * BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M * BLOCK_G, BLOCK_D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        pos = start + offs_n
        n_mask = pos < hi
        blk = tl.load(Block_tables + i * stride_bt + pos // PAGE, mask=n_mask, other=0).to(tl.int64)
        off = pos % PAGE
        kv_mask = n_mask[:, None] & d_mask[None, :]
        srow = (blk * PAGE + off) * tl.num_programs(2) + kh  # a quantized cache's scales of these keys
        k_rows = blk * stride_kb + off * stride_ks + kh * stride_kh
        k = load_kv(K_cache, K_scale, k_rows, srow, offs_d, kv_mask, n_mask, Q.dtype.element_ty, KV_KIND)
        s = qk_dot(q, k, UPCAST) * scale  # [BLOCK_M * BLOCK_G, BLOCK_N]
        if USE_SOFTCAP:
            s = softcap_fn(s, softcap)
        visible = n_mask[None, :] & (pos[None, :] <= q_pos[:, None])
        if USE_WINDOW:
            visible = visible & (pos[None, :] > q_pos[:, None] - window)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # a row may see no key of this tile (padding rows, window); keep its exp() finite
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v_rows = blk * stride_vb + off * stride_vs + kh * stride_vh
        v = load_kv(V_cache, V_scale, v_rows, srow, offs_d, kv_mask, n_mask, Q.dtype.element_ty, KV_KIND)
        acc = acc * alpha[:, None] + pv_dot(p, v, UPCAST)
        m_i = m_new

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(
        Out + (q_start + tok)[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
        out.to(Out.dtype.element_ty),
        mask=r_mask[:, None] & d_mask[None, :],
    )


def prefill_constexprs(
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    page: int,
    dtype: torch.dtype,
    sliding_window: int | None,
    softcap: float | None,
    block_rows: int | None = None,
    block_n: int | None = None,
    kv_kind: int = 0,
) -> dict:
    """The prefill kernel's compile-time arguments: one variant per layer kind of a model, whatever the
    step (what warm-up compiles, and what an ahead-of-time compile for a GPU target builds). `block_n`:
    keys per tile (default `block_n_for(head_dim)`); `block_rows`: rows per tile (default
    `prefill_block_rows`); `kv_kind`: the cache's `kv_quant.KV_KINDS`."""
    g = num_heads // num_kv_heads
    block_rows = block_rows or prefill_block_rows(head_dim, dtype)
    block_g = triton.next_power_of_2(g)
    block_m = max(1, block_rows // block_g, 16 // block_g)  # at least 16 rows for tl.dot
    return dict(
        G=g, HEAD_DIM=head_dim, BLOCK_D=block_d(head_dim), BLOCK_M=block_m, BLOCK_G=block_g,
        BLOCK_N=block_n or block_n_for(head_dim), PAGE=page, USE_WINDOW=sliding_window is not None,
        USE_SOFTCAP=softcap is not None, UPCAST=upcast_dot(dtype), KV_KIND=kv_kind,
    )  # fmt: skip


def prefill_launch_options(constexprs: dict, dtype: torch.dtype, budget: int) -> dict:
    """`num_warps`, `num_stages` of the prefill kernel launched with `constexprs` (`tile_launch_options`)."""
    size = 4 if constexprs["UPCAST"] else dtype.itemsize  # upcast tiles are converted to float32
    c = constexprs
    return tile_launch_options(c["BLOCK_M"] * c["BLOCK_G"], c["BLOCK_N"], c["HEAD_DIM"], size, budget)


def paged_prefill_attention(
    q: torch.Tensor,  # [T, H, D]
    key_cache: torch.Tensor,  # [num_blocks, block_size, Hkv, D]
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [P, max_blocks] int32
    query_start_loc: torch.Tensor,  # [P + 1] int32
    seq_lens: torch.Tensor,  # [P] int32
    max_query_len: int,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
    block_rows: int | None = None,
    block_n: int | None = None,
    out: torch.Tensor | None = None,
    kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None,
    kv_kind: int = 0,
) -> torch.Tensor:  # [T, H, D]
    """Causal attention of every prefill chunk over its cached context and itself (both in the cache); a
    quantized cache's codes and scales as `paged_decode_attention` takes them."""
    t, h, d = q.shape
    _, page, hkv, _ = key_cache.shape
    if out is None:
        out = torch.empty_like(q)
    num_seqs = query_start_loc.shape[0] - 1
    if t == 0 or num_seqs == 0:
        return out
    if q.stride(-1) != 1:
        q = q.contiguous()
    constexprs = prefill_constexprs(
        h, hkv, d, page, q.dtype, sliding_window, softcap, block_rows, block_n, kv_kind
    )
    k_scale, v_scale = kv_scales if kv_scales is not None else (key_cache, value_cache)  # unread: KV_KIND 0
    grid = (num_seqs, triton.cdiv(max_query_len, constexprs["BLOCK_M"]), hkv)
    _prefill_kernel[grid](
        q, key_cache, value_cache, k_scale, v_scale, out, block_tables, query_start_loc, seq_lens,
        scale, softcap or 0.0, sliding_window or 0,
        q.stride(0), q.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        out.stride(0), out.stride(1), block_tables.stride(0),
        **constexprs, **prefill_launch_options(constexprs, q.dtype, shared_memory_budget(q.device)),
    )  # fmt: skip
    return out
