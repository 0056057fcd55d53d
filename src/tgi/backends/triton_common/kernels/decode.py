"""Paged decode attention, one new token per sequence, split over the sequence (flash-decoding).

Stage 1 runs one program per (sequence, kv head, split): the G query heads that share the kv head are the
rows of one `tl.dot` (grouped-query attention without expanding keys/values), and the split walks its share
of the context in tiles of BLOCK_N keys, gathering each key's page from the block table (so any power-of-two
block size works, down to 1). It writes a partial output normalised by its own softmax sum, plus the split's
log-sum-exp. Stage 2 merges the splits with weights exp(lse_i - max lse). With one split, stage 1 writes the
output directly. The split length is computed in the kernel from each sequence's own length, so the launch
depends only on (batch, heads, number of splits) — what a CUDA graph needs to be replayed for any lengths.
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


# the block table's width changes from step to step, and the metadata tensors are views at any offset of one
# packed copy (`build_attention_metadata`): neither is a specialisation (a new variant) of its own
@triton.jit(do_not_specialize=["stride_bt"], do_not_specialize_on_alignment=["Block_tables", "Seq_lens"])
def _decode_split_kernel(
    Q,  # [B, H, D]
    K_cache,  # [num_blocks, PAGE, Hkv, D] (a quantized cache: its codes, uint8)
    V_cache,
    K_scale,  # [num_blocks, PAGE, Hkv] float32: a quantized cache's scales (KV_KIND > 0)
    V_scale,
    Block_tables,  # [B, max_blocks] int32
    Seq_lens,  # [B] int32, including the new token
    Out,  # [B, H, D] (used when NUM_SPLITS == 1)
    Out_partial,  # [B, H, NUM_SPLITS, D] float32
    Lse_partial,  # [B, H, NUM_SPLITS] float32
    scale,
    softcap,
    window,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_bt,
    stride_ob,
    stride_oh,
    G: tl.constexpr,  # query heads per kv head
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_H: tl.constexpr,  # >= G, >= 16
    BLOCK_N: tl.constexpr,
    PAGE: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
    UPCAST: tl.constexpr,
    KV_KIND: tl.constexpr = 0,  # `kv_quant.KV_KINDS`: 0 the model's dtype, else codes and scales
):
    b = tl.program_id(0)
    kh = tl.program_id(1)
    sp = tl.program_id(2)
    seq_len = tl.load(Seq_lens + b)
    kv_start = 0
    if USE_WINDOW:
        kv_start = tl.maximum(seq_len - window, 0)
    split_len = tl.cdiv(tl.cdiv(seq_len - kv_start, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = kv_start + sp * split_len
    hi = tl.minimum(lo + split_len, seq_len)

    offs_g = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    heads = kh * G + offs_g
    g_mask = offs_g < G
    d_mask = offs_d < HEAD_DIM
    q = tl.load(
        Q + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    )
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], dtype=tl.float32)
    for start in range(lo, hi, BLOCK_N):
        pos = start + offs_n
        n_mask = pos < hi
        blk = tl.load(Block_tables + b * stride_bt + pos // PAGE, mask=n_mask, other=0).to(tl.int64)
        off = pos % PAGE
        kv_mask = n_mask[:, None] & d_mask[None, :]
        srow = (blk * PAGE + off) * tl.num_programs(1) + kh  # a quantized cache's scales of these keys
        k_rows = blk * stride_kb + off * stride_ks + kh * stride_kh
        k = load_kv(K_cache, K_scale, k_rows, srow, offs_d, kv_mask, n_mask, Q.dtype.element_ty, KV_KIND)
        s = qk_dot(q, k, UPCAST) * scale  # [BLOCK_H, BLOCK_N]
        if USE_SOFTCAP:
            s = softcap_fn(s, softcap)
        s = tl.where(n_mask[None, :], s, float("-inf"))
        # every tile holds at least one valid key (start < hi), so m_new is finite
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v_rows = blk * stride_vb + off * stride_vs + kh * stride_vh
        v = load_kv(V_cache, V_scale, v_rows, srow, offs_d, kv_mask, n_mask, Q.dtype.element_ty, KV_KIND)
        acc = acc * alpha[:, None] + pv_dot(p, v, UPCAST)
        m_i = m_new

    has = l_i > 0  # false only for a split past the end of a short sequence
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    o_mask = g_mask[:, None] & d_mask[None, :]
    if NUM_SPLITS == 1:
        o_ptr = Out + b * stride_ob + heads[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptr, out.to(Out.dtype.element_ty), mask=o_mask)
    else:
        row = (b * G * tl.num_programs(1) + heads) * NUM_SPLITS + sp  # [B, H, NUM_SPLITS] flat index
        tl.store(Out_partial + row[:, None] * HEAD_DIM + offs_d[None, :], out, mask=o_mask)
        lse = tl.where(has, m_i + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
        tl.store(Lse_partial + row, lse, mask=g_mask)


@triton.jit
def _decode_reduce_kernel(
    Out,  # [B, H, D]
    Out_partial,  # [B, H, NUM_SPLITS, D] float32
    Lse_partial,  # [B, H, NUM_SPLITS] float32
    stride_ob,
    stride_oh,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < NUM_SPLITS
    row = (b * NUM_HEADS + h) * NUM_SPLITS
    lse = tl.load(Lse_partial + row + offs_s, mask=s_mask, other=float("-inf"))
    w = tl.exp(lse - tl.max(lse, 0))  # split 0 always holds keys, so the max is finite
    w = w / tl.sum(w, 0)
    part = tl.load(
        Out_partial + (row + offs_s[:, None]) * HEAD_DIM + offs_d[None, :],
        mask=s_mask[:, None] & (offs_d[None, :] < HEAD_DIM),
        other=0.0,
    )
    out = tl.sum(part * w[:, None], 0)
    tl.store(
        Out + b * stride_ob + h * stride_oh + offs_d, out.to(Out.dtype.element_ty), mask=offs_d < HEAD_DIM
    )


def decode_constexprs(
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    page: int,
    dtype: torch.dtype,
    num_splits: int,
    sliding_window: int | None,
    softcap: float | None,
    block_n: int | None = None,
    kv_kind: int = 0,
) -> dict:
    """The split kernel's compile-time arguments for one launch: one variant of the kernel per distinct
    result (what warm-up compiles, and what an ahead-of-time compile for a GPU target builds). `block_n`:
    keys per tile (default `block_n_for(head_dim)`); `kv_kind`: the cache's `kv_quant.KV_KINDS`."""
    g = num_heads // num_kv_heads
    return dict(
        G=g, HEAD_DIM=head_dim, BLOCK_D=block_d(head_dim), BLOCK_H=max(16, triton.next_power_of_2(g)),
        BLOCK_N=block_n or block_n_for(head_dim), PAGE=page, NUM_SPLITS=num_splits,
        USE_WINDOW=sliding_window is not None, USE_SOFTCAP=softcap is not None, UPCAST=upcast_dot(dtype),
        KV_KIND=kv_kind,
    )  # fmt: skip


def decode_launch_options(constexprs: dict, dtype: torch.dtype, budget: int) -> dict:
    """`num_warps`, `num_stages` of the split kernel launched with `constexprs` (`tile_launch_options`)."""
    size = 4 if constexprs["UPCAST"] else dtype.itemsize  # upcast tiles are converted to float32
    c = constexprs
    return tile_launch_options(c["BLOCK_H"], c["BLOCK_N"], c["HEAD_DIM"], size, budget)


def reduce_constexprs(num_heads: int, head_dim: int, num_splits: int) -> dict:
    """The reduce kernel's compile-time arguments (launched for `num_splits` > 1 only)."""
    return dict(
        NUM_HEADS=num_heads, HEAD_DIM=head_dim, BLOCK_D=block_d(head_dim),
        NUM_SPLITS=num_splits, BLOCK_S=triton.next_power_of_2(num_splits),
    )  # fmt: skip


def paged_decode_attention(
    q: torch.Tensor,  # [B, H, D]
    key_cache: torch.Tensor,  # [num_blocks, block_size, Hkv, D]
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [B, max_blocks] int32
    seq_lens: torch.Tensor,  # [B] int32
    scale: float,
    num_splits: int = 1,
    sliding_window: int | None = None,
    softcap: float | None = None,
    block_n: int | None = None,
    out: torch.Tensor | None = None,
    kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None,
    kv_kind: int = 0,
) -> torch.Tensor:  # [B, H, D]
    """Attention of one query token per sequence over its paged context. `num_splits` > 1 splits each
    context over that many programs per (sequence, kv head) and merges them (for long contexts and small
    batches, where one program per head would leave most of the GPU idle). A quantized cache (`kv_kind` > 0,
    `kv_quant.KV_KINDS`): the caches hold its codes (uint8) and `kv_scales` its key and value scales
    [num_blocks, block_size, Hkv] float32, contiguous."""
    bsz, h, d = q.shape
    _, page, hkv, _ = key_cache.shape
    if out is None:
        out = torch.empty_like(q)
    if bsz == 0:
        return out
    if q.stride(-1) != 1:
        q = q.contiguous()
    if num_splits > 1:
        partial = torch.empty(bsz, h, num_splits, d, dtype=torch.float32, device=q.device)
        lse = torch.empty(bsz, h, num_splits, dtype=torch.float32, device=q.device)
    else:
        partial = lse = out  # unused
    constexprs = decode_constexprs(
        h, hkv, d, page, q.dtype, num_splits, sliding_window, softcap, block_n, kv_kind
    )
    k_scale, v_scale = kv_scales if kv_scales is not None else (key_cache, value_cache)  # unread: KV_KIND 0
    _decode_split_kernel[(bsz, hkv, num_splits)](
        q, key_cache, value_cache, k_scale, v_scale, block_tables, seq_lens, out, partial, lse,
        scale, softcap or 0.0, sliding_window or 0,
        q.stride(0), q.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        **constexprs, **decode_launch_options(constexprs, q.dtype, shared_memory_budget(q.device)),
    )  # fmt: skip
    if num_splits > 1:
        _decode_reduce_kernel[(bsz, h)](
            out, partial, lse, out.stride(0), out.stride(1), **reduce_constexprs(h, d, num_splits)
        )
    return out
