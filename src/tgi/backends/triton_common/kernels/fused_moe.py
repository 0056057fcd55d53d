"""Fused mixture-of-experts: the experts' gated MLPs for every (token, expert) pair in two grouped GEMMs.

The pairs are sorted by expert and each expert's run padded to a multiple of BLOCK_M rows
(`align_pairs`, on the device without a host sync), so every tile of BLOCK_M rows belongs to one expert. Kernel 1 multiplies a tile of
gathered token rows by that expert's gate and up rows and stores SiLU(gate) * up; kernel 2 multiplies that
by the expert's down matrix, scales each row by its routing weight and stores it at the pair's place. The
k pairs of a token are summed at the end. Padding rows point past the last pair and are masked.

Computes what `tgi.core.models.moe.grouped_moe` computes (SiLU experts), within the dtype's rounding.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tgi.backends.triton_common.kernels.common import qk_dot, upcast_dot


def align_pairs(ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [T, k] -> (pair indices [P] int32, grouped by expert, each expert's run padded with T * k to a
    multiple of BLOCK_M; the expert of each BLOCK_M tile [P / BLOCK_M] int32).

    P is the most the padding can need, T * k + E * (BLOCK_M - 1) rounded up to BLOCK_M, so nothing is read
    back to the host (no sync; the shapes depend on T only, as CUDA graphs need): tiles past the last
    expert's run hold only padding and name the last expert."""
    flat = ids.reshape(-1).to(torch.int64)
    num_pairs = flat.numel()
    device = ids.device
    order = torch.argsort(flat, stable=True)
    # not bincount: on CUDA it reads the ids' min and max back to the host (a sync graphs cannot capture)
    counts = torch.zeros(num_experts, dtype=torch.int64, device=device).index_add_(
        0, flat, torch.ones_like(flat)
    )
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)
    starts = ends - padded  # each expert's first row in the padded order
    run_starts = torch.cumsum(counts, 0) - counts  # ... in the unpadded sorted order
    sorted_experts = flat[order]
    rank_in_run = torch.arange(num_pairs, device=device) - run_starts[sorted_experts]
    num_tiles = -(-(num_pairs + num_experts * (block_m - 1)) // block_m)
    pairs = torch.full((num_tiles * block_m,), num_pairs, dtype=torch.int32, device=device)
    pairs[starts[sorted_experts] + rank_in_run] = order.to(torch.int32)
    tile_rows = torch.arange(num_tiles, device=device) * block_m
    tile_experts = torch.searchsorted(ends, tile_rows, right=True).clamp_(max=num_experts - 1)
    return pairs, tile_experts.to(torch.int32)


# the pair count (tokens x top-k) only bounds the masks: not a specialisation of its own, so one variant
# per (dtype, top-k) serves every step
@triton.jit(do_not_specialize=["num_pairs"])
def _gate_up_kernel(
    x_ptr, w13_ptr, h_ptr, pairs_ptr, tile_experts_ptr,
    num_pairs, H, INTER,
    stride_xt, stride_we, stride_wn, stride_hm,
    TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    """h[row] = SiLU(x[token] . gate_e) * (x[token] . up_e) for the tile's rows, on BLOCK_N columns of I."""
    tile = tl.program_id(0)
    nb = tl.program_id(1)
    expert = tl.load(tile_experts_ptr + tile)
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(pairs_ptr + rows)
    valid = pair < num_pairs
    token = tl.where(valid, pair // TOP_K, 0)
    cols = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < INTER
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    w_base = w13_ptr + expert * stride_we
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < H
        x = tl.load(
            x_ptr + token[:, None] * stride_xt + ks[None, :], mask=valid[:, None] & k_ok[None, :], other=0.0
        )
        wmask = col_ok[:, None] & k_ok[None, :]
        wg = tl.load(w_base + cols[:, None] * stride_wn + ks[None, :], mask=wmask, other=0.0)
        wu = tl.load(w_base + (cols[:, None] + INTER) * stride_wn + ks[None, :], mask=wmask, other=0.0)
        gate += qk_dot(x, wg, UPCAST)
        up += qk_dot(x, wu, UPCAST)
    h = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(
        h_ptr + rows[:, None] * stride_hm + cols[None, :], h.to(h_ptr.dtype.element_ty), mask=col_ok[None, :]
    )


@triton.jit(do_not_specialize=["num_pairs"])
def _down_kernel(
    h_ptr, w2_ptr, out_ptr, weights_ptr, pairs_ptr, tile_experts_ptr,
    num_pairs, H, INTER,
    stride_hm, stride_we, stride_wn, stride_op,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """out[pair] = weight[pair] * (h[row] . down_e) on BLOCK_N columns of H, for the tile's valid rows."""
    tile = tl.program_id(0)
    nb = tl.program_id(1)
    expert = tl.load(tile_experts_ptr + tile)
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(pairs_ptr + rows)
    valid = pair < num_pairs
    cols = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < H
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    w_base = w2_ptr + expert * stride_we
    for k0 in range(0, INTER, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < INTER
        h = tl.load(h_ptr + rows[:, None] * stride_hm + ks[None, :], mask=k_ok[None, :], other=0.0)
        w = tl.load(
            w_base + cols[:, None] * stride_wn + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0
        )
        acc += qk_dot(h, w, UPCAST)
    weight = tl.load(weights_ptr + pair, mask=valid, other=0.0)
    acc = acc * weight[:, None]
    safe = tl.where(valid, pair, 0)
    tl.store(out_ptr + safe[:, None] * stride_op + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=valid[:, None] & col_ok[None, :])  # fmt: skip


def fused_moe(
    x: torch.Tensor,  # [T, H]
    w13: torch.Tensor,  # [E, 2 I, H]: gate rows, then up rows
    w2: torch.Tensor,  # [E, H, I]
    weights: torch.Tensor,  # [T, k] float32 routing weights
    ids: torch.Tensor,  # [T, k] expert ids
    block_m: int = 16,
    block_n: int = 32,
    block_k: int = 32,
) -> torch.Tensor:
    """sum_j weights[t, j] * down_e(SiLU(gate_e x_t) * up_e x_t), e = ids[t, j], for every token t: [T, H]
    in x's dtype (intermediate products in x's dtype, accumulation in float32)."""
    t, h_dim = x.shape
    top_k = ids.shape[1]
    num_experts, two_inter, _ = w13.shape
    inter = two_inter // 2
    x, w13, w2 = x.contiguous(), w13.contiguous(), w2.contiguous()
    pairs, tile_experts = align_pairs(ids, num_experts, block_m)
    num_tiles = tile_experts.numel()
    h = torch.empty(num_tiles * block_m, inter, dtype=x.dtype, device=x.device)
    out = torch.zeros(t * top_k, h_dim, dtype=torch.float32, device=x.device)
    upcast = upcast_dot(x.dtype)
    if t:
        _gate_up_kernel[(num_tiles, triton.cdiv(inter, block_n))](
            x, w13, h, pairs, tile_experts, t * top_k, h_dim, inter,
            x.stride(0), w13.stride(0), w13.stride(1), h.stride(0),
            TOP_K=top_k, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, UPCAST=upcast,
        )  # fmt: skip
        _down_kernel[(num_tiles, triton.cdiv(h_dim, block_n))](
            h, w2, out, weights.reshape(-1).float().contiguous(), pairs, tile_experts, t * top_k, h_dim, inter,
            h.stride(0), w2.stride(0), w2.stride(1), out.stride(0),
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, UPCAST=upcast,
        )  # fmt: skip
    return out.view(t, top_k, h_dim).sum(dim=1).to(x.dtype)
