"""Checks that the AVX2 int8 block kernels (`impl="avx2-int8"`: the K-quants, Q4_0, Q4_1, Q8_0) share: the
CPU has what they need, a product equals the integer model of its format, and a row does not depend on the
rows beside it. Each format's integer model stays with its tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

from tgi.backends.cpu import native
from tgi.backends.cpu.cpuinfo import cpu_info

AVX2_FLAGS = ("avx2", "fma", "f16c")


def require_avx2() -> None:
    """Skip, naming the missing flags, on a CPU without AVX2, FMA and F16C; where it has them the kernels
    must offer avx2-int8."""
    missing = [flag for flag in AVX2_FLAGS if flag not in cpu_info().flags]
    if missing:
        pytest.skip(f"{MISSING_CPU_FEATURE}: {', '.join(missing)}")
    assert "avx2-int8" in native.block_impls(), "this CPU has AVX2, FMA and F16C, the kernels miss avx2-int8"


def assert_integer_product(
    x: torch.Tensor, block, bias: torch.Tensor, int8_model: Callable[[torch.Tensor, object], np.ndarray]
) -> None:
    """float32 `x`: avx2-int8 gives the same bits as `int8_model(x, block)` plus `bias`; bfloat16 x: that
    result plus the bias, rounded once to bfloat16."""
    qtype, rows, cols = block.qtype, block.rows, block.cols
    packed = native.block_pack(block.data, qtype, rows, cols)
    y = native.block_linear(x, packed, qtype, rows, cols, bias, impl="avx2-int8")
    assert y.dtype == torch.float32 and y.shape == (x.shape[0], rows)
    expected = torch.from_numpy(int8_model(x, block)) + bias
    assert torch.equal(y, expected), (y - expected).abs().max()
    xb = x.bfloat16()
    yb = native.block_linear(xb, packed, qtype, rows, cols, bias.bfloat16(), impl="avx2-int8")
    expected_b = (torch.from_numpy(int8_model(xb, block)) + bias.bfloat16().float()).bfloat16()
    assert torch.equal(yb, expected_b)


def assert_rows_do_not_depend_on_the_batch(x: torch.Tensor, block, parts: Sequence[tuple[int, int]]) -> None:
    """Each row of `x` gives the same bits alone as in the whole batch, and so does each (start, count)
    slice of `parts`."""
    qtype, rows, cols = block.qtype, block.rows, block.cols
    packed = native.block_pack(block.data, qtype, rows, cols)
    whole = native.block_linear(x, packed, qtype, rows, cols, None, impl="avx2-int8")
    for i in range(x.shape[0]):
        alone = native.block_linear(x[i : i + 1], packed, qtype, rows, cols, None, impl="avx2-int8")
        assert torch.equal(whole[i : i + 1], alone), i
    for start, count in parts:
        part = native.block_linear(
            x[start : start + count], packed, qtype, rows, cols, None, impl="avx2-int8"
        )
        assert torch.equal(whole[start : start + count], part), (start, count)
