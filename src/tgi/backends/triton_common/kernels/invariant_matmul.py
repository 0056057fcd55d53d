"""The batch-invariant dense product (`--deterministic`): y = x @ W.T (+ bias) with one fixed tile shape.

cuBLAS (behind `F.linear` on a GPU) picks its kernel by the product's shape, and for few rows splits K over
several programs: a row's sum then depends on how many rows share the call. This kernel never does either:
every program computes one BLOCK_M x BLOCK_N output tile, walking K from 0 in BLOCK_K steps into a float32
accumulator, with the same tile sizes (and warps and stages) for every row count. An output element's sum is
therefore the same sequence of the same `tl.dot` steps whichever rows sit beside it in its tile: rows are
never mixed inside a dot, only the grid grows with M. The result is rounded once to x's dtype, the bias added
to the float32 sum before that rounding.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tgi.backends.triton_common.kernels.common import qk_dot, upcast_dot

#: the one tile shape (never chosen by shape: that is the point)
BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 64
NUM_WARPS = 4
NUM_STAGES = 2


# the row count only bounds the masks: not a specialisation of its own (one variant per weight shape class)
@triton.jit(do_not_specialize=["M"])
def _invariant_matmul_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
    HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        x = tl.load(
            x_ptr + rows[:, None].to(tl.int64) * stride_xm + ks[None, :],
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        w = tl.load(
            w_ptr + cols[:, None].to(tl.int64) * stride_wn + ks[None, :],
            mask=col_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        acc += qk_dot(x, w, UPCAST)  # [BLOCK_M, BLOCK_K] . [BLOCK_N, BLOCK_K]^T
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    out = y_ptr + rows[:, None].to(tl.int64) * stride_ym + cols[None, :]
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., K] @ weight [N, K].T (+ bias [N]) in x's dtype, each row's result independent of the others
    (see the module docstring). `weight` and `bias` must be in x's dtype."""
    n, k = weight.shape
    if x.shape[-1] != k:
        raise ValueError(f"x [..., {x.shape[-1]}] does not fit a weight of [{n}, {k}]")
    if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise ValueError(f"weight {weight.dtype} / bias must be in x's dtype {x.dtype}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if weight.stride(-1) != 1:
        weight = weight.contiguous()
    m = x2.shape[0]
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m:
        grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N))
        _invariant_matmul_kernel[grid](
            x2, weight, bias if bias is not None else weight, y, m, n, k,
            x2.stride(0), weight.stride(0), y.stride(0),
            HAS_BIAS=bias is not None, UPCAST=upcast_dot(x.dtype),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )  # fmt: skip
    return y.reshape(*lead, n)


class InvariantLinear:
    """A `linear_kernel` (see `tgi.core.models.layers.linear`) over a dense weight through
    `invariant_linear`."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return invariant_linear(x, self.weight, bias)
