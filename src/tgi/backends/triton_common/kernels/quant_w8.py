"""Weight-only GEMMs on 8-bit weights (CUDA/ROCm): y = (x @ W8.T) * scale, W8 [N, K] either float8_e4m3fn
as FP8 checkpoints store it (compressed-tensors, TGI/vLLM `fp8`, or `--quantize fp8` at load) or int8
(symmetric, EETQ's weight-only scheme, `--quantize eetq`); x in 16 or 32 bits (w8a16: activations are not
quantized; an activation scale in the checkpoint is not used by this kernel).

`scale` is per tensor ([] or [1]) or per output channel ([N] or [N, 1]); either factors out of the sum over
K, so the kernel multiplies the float32 accumulator by it once per column.

The FP8 bytes are decoded with integer arithmetic, not by the hardware's FP8 conversion, so the kernel
needs no FP8 instructions (Ampere and MI200 have none; MI300's native FP8 is the other, "fnuz", encoding)
and runs in the interpreter (the only place it has run): the 7 exponent-and-mantissa bits of e4m3fn moved
into a float16's bits at the same place relative to the binary point give the value times 2**-8 (normal
and subnormal numbers alike, the exponent biases being 7 and 15), so value = that float16 * 256. e4m3fn's
NaN (0x7F/0xFF) decodes to 480 instead: weights hold no NaN. Block sizes and the K split are those of
`quant_int` (untuned: no GPU was available to tune them).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tgi.backends.triton_common.kernels.common import upcast_dot
from tgi.backends.triton_common.kernels.quant_int import BLOCK_K, BLOCK_M, BLOCK_N, split_k, split_launch


@triton.jit
def _e4m3fn_to_f32(b):
    """uint8 e4m3fn bytes -> their float32 values (NaN excepted, see the module docstring)."""
    b = b.to(tl.int32)
    half_bits = ((b & 0x80) << 8) | ((b & 0x7F) << 7)
    return half_bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32) * 256.0


# the row count only bounds the masks: not a specialisation of its own (variants: see `quant_int`)
@triton.jit(do_not_specialize=["M"])
def _w8_gemm_kernel(
    x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, K_PER_SPLIT, stride_xm, stride_wn, stride_ym,
    FP8: tl.constexpr, PER_CHANNEL: tl.constexpr, UPCAST: tl.constexpr, ATOMIC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_lo = tl.program_id(2) * K_PER_SPLIT
    for k0 in range(k_lo, tl.minimum(k_lo + K_PER_SPLIT, K), BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        x = tl.load(
            x_ptr + rows[:, None] * stride_xm + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0
        )
        wb = tl.load(
            w_ptr + cols[None, :] * stride_wn + ks[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0
        )
        if FP8:
            w = _e4m3fn_to_f32(wb)  # [BLOCK_K, BLOCK_N]
        else:
            w = wb.to(tl.float32)
        if UPCAST:
            acc += tl.dot(x.to(tl.float32), w, input_precision="ieee")
        else:
            acc += tl.dot(x, w.to(x.dtype))
    if PER_CHANNEL:
        acc *= tl.load(s_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    else:
        acc *= tl.load(s_ptr).to(tl.float32)
    out = y_ptr + rows[:, None] * stride_ym + cols[None, :]
    if ATOMIC:  # one of several programs along K (see quant_int.split_k): add into the float32 buffer
        tl.atomic_add(out, acc, mask=row_ok[:, None] & col_ok[None, :])
    else:
        tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def fp8_gemm(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, *, split: int | None = None
) -> torch.Tensor:
    """x [..., K] @ (weight.float() * scale).T -> [..., N] in x's dtype.

    :param weight: float8_e4m3fn [N, K] (or its bytes as uint8)
    :param scale: float per tensor ([] or [1]) or per output channel ([N] or [N, 1])
    :param split: programs along K (default: `quant_int.split_k`'s heuristic)
    """
    if weight.dtype == torch.float8_e4m3fn:
        weight = weight.view(torch.uint8)
    elif weight.dtype != torch.uint8:
        raise ValueError(f"FP8 kernel computes float8_e4m3fn weights, got {weight.dtype}")
    return _launch(x, weight, scale, True, split)


def int8_gemm(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, *, split: int | None = None
) -> torch.Tensor:
    """x [..., K] @ (weight.float() * scale).T -> [..., N] in x's dtype.

    :param weight: int8 [N, K]
    :param scale: float per tensor ([] or [1]) or per output channel ([N] or [N, 1])
    :param split: programs along K (default: `quant_int.split_k`'s heuristic)
    """
    if weight.dtype != torch.int8:
        raise ValueError(f"int8 kernel computes int8 weights, got {weight.dtype}")
    return _launch(x, weight, scale, False, split)


def _launch(
    x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, fp8: bool, split: int | None
) -> torch.Tensor:
    if weight.dim() != 2:
        raise ValueError(f"8-bit weight must be [out, in], got {tuple(weight.shape)}")
    n, k = weight.shape
    if x.shape[-1] != k:
        raise ValueError(f"x must be [..., {k}] for this weight, got {tuple(x.shape)}")
    scale = scale.reshape(-1).to(torch.float32).contiguous()
    if scale.numel() not in (1, n):
        raise ValueError(
            f"8-bit weight scale must hold 1 (per tensor) or {n} (per channel) values, got {scale.numel()}"
        )
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    weight = weight.contiguous()
    m = x2.shape[0]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m:
        grid, k_per_split, buffer = split_launch(m, n, k, x2, split_k(m, n, k, x2.device, split))
        out = y if buffer is None else buffer
        _w8_gemm_kernel[grid](
            x2, weight, scale, out, m, n, k, k_per_split, x2.stride(0), weight.stride(0), out.stride(0),
            FP8=fp8, PER_CHANNEL=scale.numel() == n and n > 1, UPCAST=upcast_dot(x.dtype),
            ATOMIC=buffer is not None, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        )  # fmt: skip
        if buffer is not None:
            y.copy_(buffer)
    return y.reshape(*lead, n)
