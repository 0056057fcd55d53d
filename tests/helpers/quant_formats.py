"""Independent references for the packed weight formats, in plain torch (element by element, from the
formats' published descriptions, sharing nothing with the kernels): quantize a float weight, pack it as the
checkpoints store it, and dequantize the integer codes back for the reference product.

GPTQ (AutoGPTQ): qweight int32 [K * bits / 32, N], consecutive input rows in one word, lowest bits first;
qzeros int32 [G, N * bits / 32] likewise along the output dim; the "gptq" (v1) format stores zero - 1.
AWQ (AutoAWQ GEMM): qweight int32 [K, N / 8], word c holds columns 8c + [0, 2, 4, 6, 1, 3, 5, 7] from the
lowest nibble up; qzeros [G, N / 8] the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


@dataclass
class IntQuantized:
    """Integer codes of a weight W [N, K]: W ~ scales[g_idx[k], n] * (q[k, n] - zeros[g_idx[k], n])."""

    q: torch.Tensor  # [K, N] int32 in [0, 2**bits)
    zeros: torch.Tensor  # [G, N] int32 (true zero points)
    scales: torch.Tensor  # [G, N] float32
    g_idx: torch.Tensor  # [K] int32
    bits: int

    def dequantize(self) -> torch.Tensor:
        """W [N, K] float32."""
        g = self.g_idx.long()
        return ((self.q - self.zeros[g]).float() * self.scales[g]).T.contiguous()


def quantize_int(
    w: torch.Tensor, bits: int, group_size: int, *, sym: bool, desc_act: bool = False, seed: int = 0
) -> IntQuantized:
    """Round-to-nearest group quantization of w [N, K] (GPTQ's storage, without its error feedback).
    desc_act: input rows are assigned to groups in a random order (as GPTQ's activation order does), so
    g_idx is a permutation of k // group_size. Asymmetric zero points are kept in [1, 2**bits - 1]: the v1
    format cannot store 0 (it stores zero - 1)."""
    n, k = w.shape
    gs = k if group_size == -1 else group_size
    maxq = 2**bits - 1
    order = torch.randperm(k, generator=torch.Generator().manual_seed(seed)) if desc_act else torch.arange(k)
    g_idx = torch.empty(k, dtype=torch.int32)
    g_idx[order] = (torch.arange(k) // gs).to(torch.int32)
    groups = -(-k // gs)
    scales = torch.empty(groups, n)
    zeros = torch.empty(groups, n, dtype=torch.int32)
    q = torch.empty(k, n, dtype=torch.int32)
    for g in range(groups):
        rows = (g_idx == g).nonzero().flatten()
        block = w[:, rows].float()  # [N, rows]
        if sym:
            s = block.abs().amax(1).clamp(min=1e-8) * 2 / maxq
            z = torch.full((n,), (maxq + 1) // 2, dtype=torch.int32)
        else:
            lo, hi = block.amin(1).clamp(max=0), block.amax(1).clamp(min=0)
            s = ((hi - lo) / maxq).clamp(min=1e-8)
            z = torch.round(-lo / s).clamp(1, maxq).to(torch.int32)
        scales[g], zeros[g] = s, z
        q[rows] = torch.round(block / s[:, None] + z[:, None]).clamp(0, maxq).to(torch.int32).T
    return IntQuantized(q, zeros, scales, g_idx, bits)


def _to_int32(words: torch.Tensor) -> torch.Tensor:
    """int64 words holding 32 bits -> int32 with the same bits."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def pack_gptq(qz: IntQuantized, *, v1: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(qweight [K * bits / 32, N], qzeros [G, N * bits / 32]) int32, element by element."""
    per = 32 // qz.bits
    k, n = qz.q.shape
    zeros = (qz.zeros - 1) if v1 else qz.zeros
    qweight = torch.zeros(k // per, n, dtype=torch.int64)
    for r in range(k):
        qweight[r // per] |= qz.q[r].long() << (qz.bits * (r % per))
    qzeros = torch.zeros(zeros.shape[0], n // per, dtype=torch.int64)
    for c in range(n):
        qzeros[:, c // per] |= (zeros[:, c].long() & (2**qz.bits - 1)) << (qz.bits * (c % per))
    return _to_int32(qweight), _to_int32(qzeros)


def pack_awq(qz: IntQuantized, order: tuple[int, ...] = AWQ_PACK_ORDER) -> tuple[torch.Tensor, torch.Tensor]:
    """(qweight [K, N / 8], qzeros [G, N / 8]) int32 in AWQ's interleaved order (`order`: another one, for
    a test that a kernel does not ignore it)."""
    assert qz.bits == 4

    def pack(codes: torch.Tensor) -> torch.Tensor:  # [R, N] -> [R, N / 8]
        out = torch.zeros(codes.shape[0], codes.shape[1] // 8, dtype=torch.int64)
        for c in range(out.shape[1]):
            for nibble, col in enumerate(order):
                out[:, c] |= codes[:, 8 * c + col].long() << (4 * nibble)
        return _to_int32(out)

    return pack(qz.q), pack(qz.zeros)


def quantize_fp8(w: torch.Tensor, per_channel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(float8_e4m3fn [N, K], float32 scale [N, 1] or []): absmax scaling to e4m3fn's largest value, 448."""
    amax = w.abs().amax(1, keepdim=True) if per_channel else w.abs().amax()
    scale = (amax.float() / 448.0).clamp(min=1e-12)
    return (w.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 [N, K], float32 scale [N, 1]): symmetric per-row absmax to 127 (EETQ's weight-only scheme)."""
    scale = (w.abs().amax(1, keepdim=True).float() / 127.0).clamp(min=1e-12)
    return torch.round(w.float() / scale).clamp(-127, 127).to(torch.int8), scale
