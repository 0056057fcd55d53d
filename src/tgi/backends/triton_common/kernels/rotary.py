"""Rotate-half rotary embedding of q and k in place, one launch per layer (`Attention.rotary_kernel`).

`tgi.core.models.rotary.apply_rotary` is six torch ops per tensor (chunk, four products and two sums, a
cat) and runs on q and k apart; here one program rotates one head of one token, q's and k's heads alike,
straight in the fused qkv projection's output. Arithmetic in float32, rounded once to qkv's dtype (torch
rounds each product and sum: within an ulp of the dtype of it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_kernel(
    qkv_ptr, cos_ptr, sin_ptr, stride_t, stride_c, stride_s, HALF, HEAD_DIM,
    BLOCK: tl.constexpr,
):  # fmt: skip
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    ok = offs < HALF
    base = qkv_ptr + token * stride_t + head * HEAD_DIM
    x1 = tl.load(base + offs, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(base + HALF + offs, mask=ok, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + token * stride_c + offs, mask=ok, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + token * stride_s + offs, mask=ok, other=0.0).to(tl.float32)
    dtype = qkv_ptr.dtype.element_ty
    tl.store(base + offs, (x1 * c - x2 * s).to(dtype), mask=ok)
    tl.store(base + HALF + offs, (x2 * c + x1 * s).to(dtype), mask=ok)


def rotary_inplace(
    qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, head_dim: int
) -> None:
    """`Attention.rotary_kernel`: rotate the first `heads` heads of every row of `qkv` [T, >= heads *
    head_dim] (q's heads then k's) in place; `cos`/`sin` [T, 1, head_dim // 2] (or [T, head_dim // 2])."""
    if qkv.dim() != 2 or qkv.stride(-1) != 1:
        raise ValueError(f"qkv must be [tokens, width] with unit stride, got {tuple(qkv.shape)}")
    if head_dim % 2 or qkv.shape[1] < heads * head_dim:
        raise ValueError(f"{heads} heads of {head_dim} do not fit rows of {qkv.shape[1]}")
    half = head_dim // 2
    t = qkv.shape[0]
    cos2, sin2 = cos.reshape(t, -1), sin.reshape(t, -1)
    if cos2.shape[1] != half or sin2.shape[1] != half:
        raise ValueError(f"cos/sin {tuple(cos.shape)} do not hold {half} values per token")
    if cos2.stride(-1) != 1:
        cos2 = cos2.contiguous()
    if sin2.stride(-1) != 1:
        sin2 = sin2.contiguous()
    if t and heads:
        _rotary_kernel[(t, heads)](
            qkv, cos2, sin2, qkv.stride(0), cos2.stride(0), sin2.stride(0), half, head_dim,
            BLOCK=triton.next_power_of_2(half),
        )  # fmt: skip
