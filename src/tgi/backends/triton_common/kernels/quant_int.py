"""Weight-only GEMMs on GPTQ and AWQ packed integer weights (CUDA/ROCm): y = x @ W.T with W dequantized
tile by tile inside the kernel, never materialised in memory.

Formats, as the checkpoints store them (K = in_features, N = out_features, G = number of groups):

- **GPTQ** (AutoGPTQ / GPTQModel, `bits` 4 or 8): `qweight` int32 [K * bits / 32, N], each int32 holding
  32 / bits consecutive *input* rows of one column, the lowest bits first; `qzeros` int32 [G, N * bits / 32],
  each int32 holding consecutive *output* columns the same way; `scales` [G, N]; `g_idx` int32 [K], the
  group of each input row (a permutation of `k // group_size` with `desc_act`). W[n, k] =
  scales[g, n] * (q[k, n] - (z[g, n] + zero_offset)), g = g_idx[k]. The original format ("gptq", v1) stores
  every zero point minus one, so `zero_offset` is 1 there and 0 for "gptq_v2".
- **AWQ** (AutoAWQ's GEMM packing, 4 bits): `qweight` int32 [K, N / 8], packed along the *output* dim in the
  interleaved order [0, 2, 4, 6, 1, 3, 5, 7] (bits 4*i..4*i+3 hold column 8*c + order[i]); `qzeros` int32
  [G, N / 8] in the same order; `scales` [G, N]; W[n, k] = scales[g, n] * (q[k, n] - z[g, n]),
  g = k // group_size. No zero offset, no g_idx.

The product accumulates in float32. Where groups hold whole K tiles (no g_idx, group size a multiple of
BLOCK_K, or one group), a tile's integer weights minus zero points (exact in any float dtype) go into the
dot and its partial product is scaled per column; elsewhere (g_idx, groups of 32) each weight is dequantized
and rounded to x's dtype before the dot. Dots run on float32 operands under the interpreter for bfloat16 and
always for float32 x (see `common.upcast_dot`); y is rounded once.
Products of few rows (decode steps) would leave most of a GPU idle with one program per output tile, so the
K dimension is then split over several programs that add their partial sums into a float32 buffer
(`split_k`). Block sizes and the split heuristic are untuned (no GPU was available to tune them).

Variants (a compile each, see `TritonModelRunner.compile_kernel_variants`): one per weight format (bits,
AWQ, g_idx, group tiling), x's dtype, and whether the product is split (`ATOMIC`). The row count M is not
specialised on (`do_not_specialize`), and the split is chosen from the row count rounded up to a power of
two (`row_bucket`), so the split variants a serving engine launches are those of the row counts 1, 2, 4, ...
up to its largest step: a finite set that warm-up runs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tgi.backends.triton_common.kernels.common import upcast_dot

BLOCK_M = 16  # rows of x per program: the smallest tl.dot operand
BLOCK_N = 64
BLOCK_K = 64
#: a program of a split product walks at least this many BLOCK_K tiles
MIN_TILES_PER_SPLIT = 4
_SM_COUNT: dict[int, int] = {}


def row_bucket(m: int) -> int:
    """The power of two at or above `m` rows: what `split_k` sees of a row count, so that its choice (a
    kernel variant: split or not) takes one value per power of two and warm-up can run every one."""
    return triton.next_power_of_2(max(1, m))


def splits_by_rows(device: torch.device) -> bool:
    """Whether `split_k`'s heuristic runs for tensors on `device` (torch.cuda devices: CUDA, ROCm); elsewhere
    a product is split only when asked, whatever its row count."""
    return device.type == "cuda"


def split_k(m: int, n: int, k: int, device: torch.device, requested: int | None = None) -> int:
    """How many programs share the K dimension of one output tile: 1 where the output tiles already give
    every streaming multiprocessor two programs, else as many as bring it there, at most one per
    MIN_TILES_PER_SPLIT K tiles. `requested` overrides the heuristic (tests, benchmarks), at most one per K
    tile. Tensors not on a torch.cuda device (CUDA, ROCm), e.g. the interpreter's CPU tensors: 1 unless
    requested. `m` counts as `row_bucket(m)`."""
    k_tiles = triton.cdiv(k, BLOCK_K)
    if requested is not None:
        return max(1, min(int(requested), k_tiles))
    if not splits_by_rows(device):
        return 1
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    tiles = triton.cdiv(row_bucket(m), BLOCK_M) * triton.cdiv(n, BLOCK_N)
    want = triton.cdiv(2 * _SM_COUNT[index], tiles)
    return max(1, min(want, k_tiles // MIN_TILES_PER_SPLIT))


def split_launch(m: int, n: int, k: int, x: torch.Tensor, split: int):
    """(grid, K per split, output buffer or None): the launch of a product split `split` ways along K. A
    split product adds into a zeroed float32 [m, n] buffer (atomics), rounded to x's dtype after."""
    k_per_split = triton.cdiv(triton.cdiv(k, BLOCK_K), split) * BLOCK_K
    splits = triton.cdiv(k, k_per_split)
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N), splits)
    buffer = torch.zeros(m, n, dtype=torch.float32, device=x.device) if splits > 1 else None
    return grid, k_per_split, buffer


@triton.jit
def _unpack(word, index, BITS: tl.constexpr, AWQ_ORDER: tl.constexpr):
    """Field `index` (0 .. 32 / BITS - 1) of packed int32 words, as an int32 in [0, 2**BITS)."""
    if AWQ_ORDER:
        # column j of a pack sits in nibble j // 2 + (j % 2) * 4 (the inverse of [0, 2, 4, 6, 1, 3, 5, 7])
        index = index // 2 + (index % 2) * 4
    return (word >> (index * BITS)) & ((1 << BITS) - 1)


# the row count only bounds the masks: not a specialisation (a new variant per row count class) of its own
@triton.jit(do_not_specialize=["M"])
def _int_gemm_kernel(
    x_ptr, qw_ptr, qz_ptr, s_ptr, g_ptr, y_ptr,
    M, N, K, group_size, zero_offset, K_PER_SPLIT,
    stride_xm, stride_qw, stride_qz, stride_s, stride_ym,
    BITS: tl.constexpr, AWQ: tl.constexpr, HAS_G_IDX: tl.constexpr, GROUP_TILES: tl.constexpr,
    UPCAST: tl.constexpr, ATOMIC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    PACK: tl.constexpr = 32 // BITS
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
        wmask = k_ok[:, None] & col_ok[None, :]
        if AWQ:  # [K, N / 8], packed along the output dim
            words = tl.load(qw_ptr + ks[:, None] * stride_qw + (cols // PACK)[None, :], mask=wmask, other=0)
            q = _unpack(words, (cols % PACK)[None, :], BITS, True)
        else:  # GPTQ: [K / PACK, N], packed along the input dim
            words = tl.load(qw_ptr + (ks // PACK)[:, None] * stride_qw + cols[None, :], mask=wmask, other=0)
            q = _unpack(words, (ks % PACK)[:, None], BITS, False)
        if GROUP_TILES:
            # the tile's K rows share one group: (q - z) are small integers, exact in x's dtype; the scale
            # multiplies the tile's partial product once per column
            g = k0 // group_size
            zwords = tl.load(qz_ptr + g * stride_qz + cols // PACK, mask=col_ok, other=0)
            z = _unpack(zwords, cols % PACK, BITS, AWQ) + zero_offset
            s = tl.load(s_ptr + g * stride_s + cols, mask=col_ok, other=0.0).to(tl.float32)
            wq = q - z[None, :]  # [BLOCK_K, BLOCK_N] int32; rows past K meet zeros of x
            if UPCAST:
                part = tl.dot(x.to(tl.float32), wq.to(tl.float32), input_precision="ieee")
            else:
                part = tl.dot(x, wq.to(x.dtype))
            acc += part * s[None, :]
        else:
            if HAS_G_IDX:
                g = tl.load(g_ptr + ks, mask=k_ok, other=0)
            else:
                g = ks // group_size
            zwords = tl.load(qz_ptr + g[:, None] * stride_qz + (cols // PACK)[None, :], mask=wmask, other=0)
            z = _unpack(zwords, (cols % PACK)[None, :], BITS, AWQ) + zero_offset
            s = tl.load(s_ptr + g[:, None] * stride_s + cols[None, :], mask=wmask, other=0.0).to(tl.float32)
            w = (q - z).to(tl.float32) * s  # [BLOCK_K, BLOCK_N], zero outside the masks (s = 0 there)
            if UPCAST:
                acc += tl.dot(x.to(tl.float32), w, input_precision="ieee")
            else:
                acc += tl.dot(x, w.to(x.dtype))
    out = y_ptr + rows[:, None] * stride_ym + cols[None, :]
    if ATOMIC:  # one of several programs along K: add into the float32 buffer
        tl.atomic_add(out, acc, mask=row_ok[:, None] & col_ok[None, :])
    else:
        tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _check(x: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, k: int, n: int, pack: int) -> None:
    if x.dim() != 2 or x.shape[1] != k:
        raise ValueError(f"x must be [rows, {k}] for this weight, got {tuple(x.shape)}")
    if scales.shape[1] != n or qzeros.shape != (scales.shape[0], n // pack):
        raise ValueError(
            f"scales {tuple(scales.shape)} / qzeros {tuple(qzeros.shape)} do not match "
            f"[groups, {n}] / [groups, {n // pack}]"
        )
    if qzeros.dtype != torch.int32:
        raise ValueError(f"qzeros must be int32, got {qzeros.dtype}")


def _launch(
    x, qweight, qzeros, scales, g_idx, k, n, group_size, zero_offset, bits, awq, split
) -> torch.Tensor:
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    _check(x2, qzeros, scales, k, n, 32 // bits)
    qweight, qzeros, scales = qweight.contiguous(), qzeros.contiguous(), scales.contiguous()
    m = x2.shape[0]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m:
        dummy = g_idx if g_idx is not None else qzeros  # never read without HAS_G_IDX
        grid, k_per_split, buffer = split_launch(m, n, k, x2, split_k(m, n, k, x2.device, split))
        out = y if buffer is None else buffer
        group_tiles = g_idx is None and (group_size % BLOCK_K == 0 or group_size >= k)
        _int_gemm_kernel[grid](
            x2, qweight, qzeros, scales, dummy, out,
            m, n, k, max(group_size, 1), zero_offset, k_per_split,
            x2.stride(0), qweight.stride(0), qzeros.stride(0), scales.stride(0), out.stride(0),
            BITS=bits, AWQ=awq, HAS_G_IDX=g_idx is not None, GROUP_TILES=group_tiles,
            UPCAST=upcast_dot(x.dtype), ATOMIC=buffer is not None,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        )  # fmt: skip
        if buffer is not None:
            y.copy_(buffer)
    return y.reshape(*lead, n)


def gptq_gemm(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor | None,
    *,
    bits: int,
    group_size: int,
    zero_offset: int = 1,
    split: int | None = None,
) -> torch.Tensor:
    """x [..., K] @ W.T -> [..., N] in x's dtype, W a GPTQ weight (module docstring).

    :param g_idx: int32 [K], the group of each input row (desc_act checkpoints); None: k // group_size
    :param group_size: input rows per group; -1 (one group: per-channel) is K
    :param zero_offset: 1 for the "gptq" (v1) checkpoint format, which stores zero points minus one;
        0 for "gptq_v2"
    :param split: programs along K (default: `split_k`'s heuristic)
    """
    if bits not in (4, 8):
        raise ValueError(f"GPTQ kernel computes 4- and 8-bit weights, not {bits}-bit")
    if qweight.dtype != torch.int32:
        raise ValueError(f"GPTQ qweight must be int32, got {qweight.dtype}")
    k, n = qweight.shape[0] * (32 // bits), qweight.shape[1]
    if g_idx is not None:
        if g_idx.shape != (k,):
            raise ValueError(f"g_idx must be [{k}], got {tuple(g_idx.shape)}")
        g_idx = g_idx.to(torch.int32).contiguous()
    gs = k if group_size in (-1, 0) else group_size
    return _launch(x, qweight, qzeros, scales, g_idx, k, n, gs, zero_offset, bits, False, split)


def awq_gemm(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    *,
    group_size: int,
    split: int | None = None,
) -> torch.Tensor:
    """x [..., K] @ W.T -> [..., N] in x's dtype, W a 4-bit AWQ GEMM-packed weight (module docstring).

    :param group_size: input rows per group; -1 (one group: per-channel) is K
    :param split: programs along K (default: `split_k`'s heuristic)
    """
    if qweight.dtype != torch.int32:
        raise ValueError(f"AWQ qweight must be int32, got {qweight.dtype}")
    k, n = qweight.shape[0], qweight.shape[1] * 8
    gs = k if group_size in (-1, 0) else group_size
    return _launch(x, qweight, qzeros, scales, None, k, n, gs, 0, 4, True, split)
