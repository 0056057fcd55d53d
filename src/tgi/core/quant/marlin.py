"""Marlin-packed 4-bit weights (IST-DASLab's Marlin, AutoGPTQ's `checkpoint_format: marlin`, TGI's
`quant_method: marlin`) converted at load time to the GPTQ layout, which every backend's int4 kernel reads.

A Marlin checkpoint stores per linear `B` int32 [K / 16, N * 16 / 8] and `s` float16 [K / group, N]:
symmetric 4-bit codes (zero point 8) of the [K, N] weight, cut into 16 x 16 tiles laid side by side (tile
row t holds tiles (t, 0), (t, 1), ... each flattened row-major), every 1024 values then shuffled by the
tensor-core fragment order (`weight_perm`) and packed 8 per word, lowest nibble first; the scales shuffled
within blocks of 64 columns (grouped) or 32 (one group per row) (`scale_perms`). Conversion undoes each step
exactly: the GPTQ weight dequantizes to the same values.
"""

from __future__ import annotations

import torch

from tgi.core.quant.packing import unpack_cols
from tgi.core.quant.weights import GPTQWeight

TILE = 16


def weight_perm() -> torch.Tensor:
    """The order Marlin stores the 1024 values of 4 tiles in (position p holds value `perm[p]`)."""
    order = []
    for thread in range(32):
        col = thread // 4
        frag = [
            16 * row + col + 8 * half
            for half in (0, 1)
            for row in (2 * (thread % 4), 2 * (thread % 4) + 1, 2 * (thread % 4) + 8, 2 * (thread % 4) + 9)
        ]
        for tile in range(4):
            order += [p + 256 * tile for p in frag]
    # within each 8 values (one packed word) the nibbles are interleaved for the fast int4 -> half conversion
    words = torch.tensor(order).view(-1, 8)
    return words[:, [0, 2, 4, 6, 1, 3, 5, 7]].reshape(-1)


def scale_perms() -> tuple[list[int], list[int]]:
    """(the order of scales within 64 columns when grouped, within 32 columns when one group per row)."""
    grouped = [i + 8 * j for i in range(8) for j in range(8)]
    single = [2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)]
    return grouped, single


def _unshuffle(values: torch.Tensor, perm: list[int] | torch.Tensor) -> torch.Tensor:
    """Inverse of `values = natural.reshape(-1, len(perm))[:, perm]`, back to the same shape."""
    perm = torch.as_tensor(perm, device=values.device)
    shuffled = values.reshape(-1, perm.numel())
    natural = torch.empty_like(shuffled)
    natural[:, perm] = shuffled
    return natural.reshape(values.shape)


def marlin_to_gptq(b: torch.Tensor, s: torch.Tensor, group_size: int | None) -> GPTQWeight:
    """A Marlin `B`, `s` pair as a `GPTQWeight` (gptq_v2 zero points of 8, no act-order)."""
    k, n = b.shape[0] * TILE, b.shape[1] * 8 // TILE
    codes = unpack_cols(b, 4)  # [K / 16, N * 16] in stored order
    tiles = _unshuffle(codes, weight_perm())
    q = tiles.reshape(k // TILE, n // TILE, TILE, TILE).permute(0, 2, 1, 3).reshape(k, n)  # [K, N]
    grouped, single = scale_perms()
    group = group_size or k
    scales = _unshuffle(s, grouped if group < k else single).reshape(-1, n)
    # GPTQ packing: 8 codes per word along K for qweight, along N for the zero points (all 8)
    shifts = torch.arange(0, 32, 4, device=b.device, dtype=torch.int64)
    words = (q.to(torch.int64).view(k // 8, 8, n) << shifts[None, :, None]).sum(1)
    qweight = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    eights = (torch.full((1, 8), 8, dtype=torch.int64, device=b.device) << shifts[None, :]).sum(1)
    zero_word = torch.where(eights >= 2**31, eights - 2**32, eights).to(torch.int32)
    qzeros = zero_word.expand(scales.shape[0], n // 8).contiguous()
    return GPTQWeight(4, qweight, qzeros, scales, None, group, False, n, k)
