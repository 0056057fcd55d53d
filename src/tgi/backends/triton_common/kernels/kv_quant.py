"""The quantized KV cache in Triton (`--kv-cache-dtype int8 | fp8_e4m3fn | fp8_e5m2`): the write that quantizes
each token's key and value of each kv head into one-byte codes and a float32 scale (the CPU backend's scheme,
`tgi.backends.cpu.kv_quant`), and `load_kv`, which the decode and prefill kernels read a tile of keys or values
through, dequantized to the queries' dtype.

Codes are stored as bytes (uint8) whatever the format, and converted with integer operations only: Triton's own
float8 conversions are not what a GPU computes under the interpreter (`TRITON_INTERPRET=1` rounds -7.9 to -4 in
e4m3), and the interpreter is where CI runs these kernels.
- widening: int8 is the byte sign-extended; e5m2 is the top half of a float16; e4m3's byte, sign-extended,
  shifted left by 7 with bit 14 cleared, is the float16 of its value times 2^-8 (the CPU kernels' trick);
- rounding to a code: int8 to nearest, ties to even; float8 from the float32's bits, to nearest, ties to even,
  subnormals included, after the clamp to the format's largest value.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tgi.backends.triton_common.kernels.common import interpreting

#: the kernels' KV_KIND per KV dtype (0: the model's dtype, stored as computed)
KV_KINDS = {"auto": 0, "int8": 1, "fp8_e4m3fn": 2, "fp8_e5m2": 3}


@triton.jit
def widen_codes(codes, KV_KIND: tl.constexpr):
    """Codes (uint8) -> their values in float32 (exact)."""
    if KV_KIND == 1:
        x = codes.to(tl.int8, bitcast=True).to(tl.float32)
    elif KV_KIND == 2:
        h = ((codes.to(tl.int8, bitcast=True).to(tl.int32) << 7) & 0xBFFF).to(tl.int16)
        x = h.to(tl.float16, bitcast=True).to(tl.float32) * 256.0
    else:
        h = (codes.to(tl.int32) << 8).to(tl.int16)
        x = h.to(tl.float16, bitcast=True).to(tl.float32)
    return x


@triton.jit
def load_kv(
    Cache, Scales, rows, scale_rows, offs_d, mask, n_mask, dtype: tl.constexpr, KV_KIND: tl.constexpr
):
    """A tile of keys or values [N, D]: `Cache + rows[:, None] + offs_d[None, :]` as stored (KV_KIND 0), or the
    codes there times the scales at `Scales + scale_rows`, in `dtype`."""
    if KV_KIND == 0:
        x = tl.load(Cache + rows[:, None] + offs_d[None, :], mask=mask, other=0.0)
    else:
        codes = tl.load(Cache + rows[:, None] + offs_d[None, :], mask=mask, other=0)
        s = tl.load(Scales + scale_rows, mask=n_mask, other=0.0)
        x = (widen_codes(codes, KV_KIND) * s[:, None]).to(dtype)
    return x


@triton.jit
def _round_even(y):
    r = tl.floor(y + 0.5)
    tie = (r - y) == 0.5
    odd = (r - 2.0 * tl.floor(r * 0.5)) != 0.0
    return tl.where(tie & odd, r - 1.0, r)


@triton.jit
def _to_float8(y, MANT: tl.constexpr, BIAS: tl.constexpr, SUB: tl.constexpr):
    """|y| <= the format's largest -> its code (MANT mantissa bits, exponent bias BIAS, subnormal step SUB)."""
    bits = y.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = tl.abs(y)
    abits = a.to(tl.int32, bitcast=True)
    e = ((abits >> 23) & 0xFF) - 127 + BIAS
    m = abits & 0x7FFFFF
    keep = m >> (23 - MANT)
    rest = m & ((1 << (23 - MANT)) - 1)
    half = 1 << (22 - MANT)
    up = (rest > half) | ((rest == half) & ((keep & 1) == 1))
    normal = (e << MANT) + keep + up.to(tl.int32)  # a carry into the exponent is the right code
    # below the smallest normal (SUB * 2^MANT): multiples of SUB (the minimum keeps the others' casts in range)
    sub = _round_even(tl.minimum(a, SUB * (1 << MANT)) / SUB).to(tl.int32)
    code = tl.where(e >= 1, normal, sub)
    return (code | sign).to(tl.uint8)


@triton.jit(do_not_specialize=["num_tokens"])
def _quantize_kv_kernel(
    X,  # [T, Hkv, D] keys or values
    Codes,  # [num_blocks * PAGE, Hkv, D] uint8
    Scales,  # [num_blocks * PAGE, Hkv] float32
    Slots,  # [T] int64
    num_tokens,
    fixed,  # > 0: every token's scale (a float8 checkpoint's); else each row's own
    stride_xt,
    stride_xh,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
    KV_KIND: tl.constexpr,
):
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    h = tl.program_id(1)
    slot = tl.load(Slots + offs_t, mask=offs_t < num_tokens, other=-1).to(tl.int64)
    keep = (offs_t < num_tokens) & (slot >= 0)
    slot = tl.maximum(slot, 0)
    offs_d = tl.arange(0, BLOCK_D)
    mask = keep[:, None] & (offs_d[None, :] < HEAD_DIM)
    x = tl.load(
        X + offs_t[:, None].to(tl.int64) * stride_xt + h * stride_xh + offs_d[None, :], mask=mask, other=0.0
    )
    x = x.to(tl.float32)
    if KV_KIND == 1:
        top = 127.0
    elif KV_KIND == 2:
        top = 448.0
    else:
        top = 57344.0
    amax = tl.max(tl.abs(x), 1)
    scale = tl.where(amax > 0, amax / top, 1.0)
    scale = tl.where(fixed > 0, fixed, scale)
    y = tl.minimum(tl.maximum(x / scale[:, None], -top), top)
    if KV_KIND == 1:
        code = _round_even(y).to(tl.int32).to(tl.int8).to(tl.uint8, bitcast=True)
    elif KV_KIND == 2:
        code = _to_float8(y, 3, 7, 0.001953125)  # subnormals: multiples of 2^-9
    else:
        code = _to_float8(y, 2, 15, 0.0000152587890625)  # 2^-16
    row = slot * NUM_HEADS + h
    tl.store(Codes + row[:, None] * HEAD_DIM + offs_d[None, :], code, mask=mask)
    tl.store(Scales + row, scale, mask=keep)


def quantize_into_cache(
    x: torch.Tensor,  # [T, Hkv, D]
    codes: torch.Tensor,  # [num_blocks, block_size, Hkv, D] uint8, contiguous
    scales: torch.Tensor,  # [num_blocks, block_size, Hkv] float32, contiguous
    slot_mapping: torch.Tensor,  # [T'] int64, T' <= T
    kv_dtype: str,
    fixed_scale: float | None = None,
) -> None:
    """Quantize token i's heads into slot `slot_mapping[i]` (negative: skipped), each (token, kv head) scaled
    by its own largest value, or by `fixed_scale` (float8 only)."""
    n = slot_mapping.shape[0]
    if n == 0:
        return
    _, _, hkv, d = codes.shape
    if x.stride(-1) != 1:
        x = x.contiguous()
    block_t = 64 if interpreting() else 16
    _quantize_kv_kernel[(triton.cdiv(n, block_t), hkv)](
        x, codes, scales, slot_mapping, n, float(fixed_scale or 0.0), x.stride(0), x.stride(1),
        NUM_HEADS=hkv, HEAD_DIM=d, BLOCK_T=block_t, BLOCK_D=triton.next_power_of_2(d), KV_KIND=KV_KINDS[kv_dtype],
    )  # fmt: skip
