"""The quantized KV cache's values, in torch: the reference the native kernels are held to.

A token's key (or value) of one kv head, `x` [Dh], is stored as one-byte codes and a float32 scale, `x ~= code
* scale`:

- int8: scale = max|x| / 127 (1 where x is all zero), code = round(x / scale) (to nearest, ties to even), in
  [-127, 127]; llama.cpp's q8_0 with a block of one head instead of 32 values;
- fp8_e4m3fn / fp8_e5m2: scale = max|x| / the format's largest value (448, 57344), or the checkpoint's
  `k_scale` / `v_scale` of the layer where it ships them; code = x / scale clamped to the format's range and
  rounded to the format (to nearest, ties to even: torch's conversion).

Every float operation is float32, in the order the native writer (`native/kv_quant_write.cpp`) takes, so
both store the same bytes.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

#: the storage of each quantized KV dtype, and the largest code value
CODE_DTYPES = {"int8": torch.int8, "fp8_e4m3fn": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
CODE_MAX = {"int8": 127.0, "fp8_e4m3fn": 448.0, "fp8_e5m2": 57344.0}
#: the kinds the native kernels take
KINDS = {"int8": 0, "fp8_e4m3fn": 1, "fp8_e5m2": 2}


class QuantizedPart(NamedTuple):
    """One layer's keys (or values) as stored: codes [num_blocks, block_size, Hkv, Dh] (`CODE_DTYPES`) and
    scales [num_blocks, block_size, Hkv] float32."""

    codes: torch.Tensor
    scales: torch.Tensor
    kv_dtype: str

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape


def quantize(
    x: torch.Tensor, kv_dtype: str, fixed_scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., Dh] -> (codes [..., Dh] of `CODE_DTYPES[kv_dtype]`, scales [...] float32), one scale per row:
    computed from the row, or `fixed_scale` for every row (float8 only: the checkpoint's)."""
    xf = x.float()
    top = CODE_MAX[kv_dtype]
    if fixed_scale is not None:
        if kv_dtype == "int8":
            raise ValueError("an int8 KV cache computes its scales: a fixed scale is for float8 only")
        scale = torch.full(xf.shape[:-1], fixed_scale, dtype=torch.float32, device=x.device)
    else:
        amax = xf.abs().amax(dim=-1)
        scale = torch.where(amax > 0, amax / top, torch.ones_like(amax))
    y = xf / scale[..., None]
    if kv_dtype == "int8":
        codes = torch.round(y).clamp_(-top, top).to(torch.int8)
    else:
        codes = y.clamp_(-top, top).to(CODE_DTYPES[kv_dtype])
    return codes, scale


def dequantize(codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """codes [..., Dh] and scales [...] -> code * scale in float32, rounded once to `dtype`."""
    return (codes.float() * scales[..., None]).to(dtype)


def dequantize_blocks(
    part: QuantizedPart, codes: torch.Tensor, blocks: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """The keys (or values) of `blocks` in `dtype`: `codes` [len(blocks) * block_size, Hkv, Dh], gathered from
    `part.codes`, times their scales gathered here."""
    scales = part.scales.index_select(0, blocks.reshape(-1)).view(codes.shape[:-1])
    return dequantize(codes, scales, dtype)
