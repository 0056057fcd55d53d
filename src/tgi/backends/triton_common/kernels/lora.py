"""Batched LoRA products for CUDA/ROCm (`tgi.core.lora.ops.LoRAOps`): each token gathers its own adapter's
matrices by slot, so one launch serves a batch of any mix of adapters (Punica's BGMV shape).

Kernel 1 (shrink) computes s[t] = x[t] @ a[slot[t]].T ([T, R], float32), kernel 2 (expand) adds
s[t] @ b[slot[t]].T to y[t] in place; tokens with slot -1 (no adapter) are skipped by both. Accumulation is
in float32; y is rounded once to its dtype. Computes what `TorchLoRAOps` computes, within that rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from tgi.core.lora.ops import LoRAOps, LoRAWeights

BLOCK_K = 64  # input features per shrink iteration
BLOCK_N = 64  # output features per expand program


@triton.jit
def _shrink_kernel(
    x_ptr, a_ptr, slots_ptr, s_ptr, K, R, stride_xt, stride_as, stride_ar, stride_st,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0)
    slot = tl.load(slots_ptr + t)
    offs_r = tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_R,), dtype=tl.float32)
    if slot >= 0:
        a_rows = a_ptr + slot.to(tl.int64) * stride_as + offs_r[:, None] * stride_ar
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            xk = tl.load(x_ptr + t * stride_xt + offs_k, mask=offs_k < K, other=0.0).to(tl.float32)
            a = tl.load(
                a_rows + offs_k[None, :], mask=(offs_r[:, None] < R) & (offs_k[None, :] < K), other=0.0
            )
            acc += tl.sum(a.to(tl.float32) * xk[None, :], axis=1)
    tl.store(s_ptr + t * stride_st + offs_r, acc, mask=offs_r < R)


@triton.jit
def _expand_kernel(
    s_ptr, b_ptr, slots_ptr, y_ptr, N, R, stride_st, stride_bs, stride_bn, stride_yt,
    BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0)
    slot = tl.load(slots_ptr + t)
    if slot >= 0:
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_r = tl.arange(0, BLOCK_R)
        s = tl.load(s_ptr + t * stride_st + offs_r, mask=offs_r < R, other=0.0)
        b_rows = b_ptr + slot.to(tl.int64) * stride_bs + offs_n[:, None] * stride_bn
        b = tl.load(b_rows + offs_r[None, :], mask=(offs_n[:, None] < N) & (offs_r[None, :] < R), other=0.0)
        delta = tl.sum(b.to(tl.float32) * s[None, :], axis=1)
        y_row = y_ptr + t * stride_yt + offs_n
        y = tl.load(y_row, mask=offs_n < N, other=0.0)
        tl.store(y_row, (y.to(tl.float32) + delta).to(y_ptr.dtype.element_ty), mask=offs_n < N)


def lora_shrink_expand(y: torch.Tensor, x: torch.Tensor, weights: LoRAWeights, slots: torch.Tensor) -> None:
    """y [T, N] += per token t with slots[t] >= 0: (x[t] @ a[slot].T) @ b[slot].T, in place. Rows of x past
    `slots` (padding) are left alone."""
    t = min(x.shape[0], slots.numel())
    if t == 0:
        return
    x = x.contiguous()
    a, b = weights.a, weights.b  # [S, R, K], [S, N, R], contiguous
    rank, k, n = a.shape[1], a.shape[2], b.shape[1]
    block_r = max(triton.next_power_of_2(rank), 16)
    s = torch.empty(t, rank, dtype=torch.float32, device=x.device)
    _shrink_kernel[(t,)](
        x, a, slots, s, k, rank, x.stride(0), a.stride(0), a.stride(1), s.stride(0),
        BLOCK_R=block_r, BLOCK_K=BLOCK_K,
    )  # fmt: skip
    _expand_kernel[(t, triton.cdiv(n, BLOCK_N))](
        s, b, slots, y, n, rank, s.stride(0), b.stride(0), b.stride(1), y.stride(0),
        BLOCK_N=BLOCK_N, BLOCK_R=block_r,
    )  # fmt: skip


class TritonLoRAOps(LoRAOps):
    """`LoRAOps` through the two kernels above: the plan is the tokens' slots on the device."""

    def plan(self, token_slots: Sequence[int], device: torch.device) -> torch.Tensor | None:
        if all(s < 0 for s in token_slots):
            return None
        return torch.tensor(token_slots, dtype=torch.int32, device=device)

    def apply(
        self, y: torch.Tensor, x: torch.Tensor, weights: LoRAWeights, plan: torch.Tensor
    ) -> torch.Tensor:
        if not y.is_contiguous():
            y = y.contiguous()
        lora_shrink_expand(y, x, weights, plan)
        return y
