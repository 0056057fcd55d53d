"""RMS norm with the fused residual add, one program per row (`--deterministic`'s `RMSNorm.norm_kernel`).

torch's reductions on a GPU choose how many threads and blocks share one row's sum from the tensor's
shape, row count included; here a row's sum of squares is always BLOCK-wide float32 partial sums over the
row in order, then one `tl.sum` of that vector: the order depends on the hidden size only. The arithmetic is
`tgi.core.models.layers.RMSNorm`'s (Hugging Face's): x + residual rounded to x's dtype, statistics in
float32, the normalised row rounded to the dtype before it is multiplied by the weight (in that dtype).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: the widest chunk of a row one step loads
MAX_BLOCK = 4096


@triton.jit
def _rms_norm_kernel(
    x_ptr, r_ptr, w_ptr, out_ptr, sum_ptr, H, stride_x, stride_r, stride_o, stride_s, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    sq = tl.zeros((BLOCK,), dtype=tl.float32)
    for h0 in range(0, H, BLOCK):
        cols = h0 + offs
        ok = cols < H
        x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0)
        if HAS_RESIDUAL:
            x = x.to(tl.float32) + tl.load(r_ptr + row * stride_r + cols, mask=ok, other=0.0).to(tl.float32)
            x = x.to(sum_ptr.dtype.element_ty)  # rounded as torch's x + residual is
            tl.store(sum_ptr + row * stride_s + cols, x, mask=ok)
        xf = x.to(tl.float32)
        sq += xf * xf
    inv = 1.0 / tl.sqrt_rn(tl.sum(sq, 0) / H + eps)
    for h0 in range(0, H, BLOCK):
        cols = h0 + offs
        ok = cols < H
        if HAS_RESIDUAL:
            x = tl.load(sum_ptr + row * stride_s + cols, mask=ok, other=0.0)
        else:
            x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0)
        normed = (x.to(tl.float32) * inv).to(out_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride_o + cols, (w * normed).to(out_ptr.dtype.element_ty), mask=ok)


def rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`RMSNorm.norm_kernel`: (norm(x + residual) * weight, x + residual), or (norm(x) * weight, x) without a
    residual; every row computed alone, in an order set by the hidden size only."""
    h = x.shape[-1]
    if weight.shape != (h,):
        raise ValueError(f"weight {tuple(weight.shape)} does not fit rows of {h}")
    lead = x.shape
    x2 = x.reshape(-1, h)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    r2 = None
    if residual is not None:
        r2 = residual.reshape(-1, h)
        if r2.stride(-1) != 1:
            r2 = r2.contiguous()
    rows = x2.shape[0]
    out = torch.empty(rows, h, dtype=x.dtype, device=x.device)
    summed = torch.empty_like(out) if r2 is not None else x2
    if rows:
        _rms_norm_kernel[(rows,)](
            x2, r2 if r2 is not None else x2, weight, out, summed, h,
            x2.stride(0), (r2 if r2 is not None else x2).stride(0), out.stride(0), summed.stride(0), float(eps),
            HAS_RESIDUAL=r2 is not None, BLOCK=min(MAX_BLOCK, triton.next_power_of_2(h)),
        )  # fmt: skip
    return out.reshape(lead), (summed.reshape(lead) if r2 is not None else x)
