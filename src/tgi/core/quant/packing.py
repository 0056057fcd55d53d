"""Bit packing of the integer formats, in plain torch (shared by the formats' `dequantize` and by kernels that
repack for their own layout).

GPTQ packs `32 // bits` values per int32 along the input dim of its [in, out] qweight (value j of a word in
bits `j*bits .. j*bits+bits-1`), and its qzeros along the output dim the same way. AWQ's GEMM layout packs 8
nibbles per int32 along the output dim of [in, out/8], in the interleaved order `AWQ_PACK_ORDER`: nibble j
of a word holds output column `8 * word + AWQ_PACK_ORDER[j]`.
"""

from __future__ import annotations

import torch

AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
#: the nibble that holds column c of a word (the inverse of AWQ_PACK_ORDER)
AWQ_UNPACK_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def _shifts(bits: int, device: torch.device) -> torch.Tensor:
    return torch.arange(0, 32, bits, dtype=torch.int32, device=device)


def unpack_rows(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 [R, C] holding `32 // bits` values per word along dim 0 -> int32 [R * 32 // bits, C] in [0, 2^bits)."""
    mask = (1 << bits) - 1
    values = (packed[:, None, :] >> _shifts(bits, packed.device)[None, :, None]) & mask  # [R, per, C]
    return values.reshape(-1, packed.shape[1])


def unpack_cols(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 [R, C] holding `32 // bits` values per word along dim 1 -> int32 [R, C * 32 // bits] in [0, 2^bits)."""
    mask = (1 << bits) - 1
    values = (packed[:, :, None] >> _shifts(bits, packed.device)[None, None, :]) & mask  # [R, C, per]
    return values.reshape(packed.shape[0], -1)


def unpack_awq(packed: torch.Tensor) -> torch.Tensor:
    """AWQ GEMM int32 [R, C/8] -> int32 [R, C] in column order (undoing the interleaved nibble order)."""
    values = unpack_cols(packed, 4).view(packed.shape[0], -1, 8)
    return values[:, :, list(AWQ_UNPACK_ORDER)].reshape(packed.shape[0], -1)
