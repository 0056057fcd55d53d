"""The CPU's native float8 (e4m3fn) weight-only linear (`tgi.backends.cpu.native.fp8_linear`) on each path this
CPU has (AVX512-BF16, AVX2 float32, scalar reference) and its widened dense path for large inputs
(`FP8NativeKernel`): every finite float8 code widens to its exact value, products equal the dequantized
weight's (`FP8Weight.dequantize()`) in float32 and within bfloat16's rounding, for row counts across the
tiles (1-8 rows in one tile, then tiles reading the widened scratch), odd widths and partial row groups
(96, 37 and 200 weight rows: pairs of 16-row groups; a pair and a short group; pairs and a short last
group); NaN codes are refused."""

from __future__ import annotations

import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

from tgi.backends.cpu import native
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.core.interfaces.types import UnsupportedError
from tgi.core.quant.weights import FP8Weight

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)

#: the /proc/cpuinfo flags each implementation needs
CPU_FLAGS = {
    "reference": (),
    "avx512-bf16": ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "f16c", "fma"),
    "avx2": ("avx2", "fma", "f16c"),
}
#: (implementation, activation dtype): the avx512-bf16 path takes bfloat16 inputs only
CASES = [
    (impl, dtype)
    for impl in CPU_FLAGS
    for dtype in (torch.float32, torch.bfloat16)
    if impl != "avx512-bf16" or dtype == torch.bfloat16
]


def require(impl: str) -> None:
    missing = [flag for flag in CPU_FLAGS[impl] if flag not in cpu_info().flags]
    if missing:
        pytest.skip(f"{MISSING_CPU_FEATURE}: {', '.join(missing)}")
    assert impl in native.fp8_impls(), f"this CPU has {', '.join(CPU_FLAGS[impl])}, the kernels miss {impl}"


def every_finite_code() -> torch.Tensor:
    """float8_e4m3fn [2, 127]: each of the 254 finite codes once (zeros, subnormals, both signs)."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    return codes[(codes & 0x7F) != 0x7F].view(torch.float8_e4m3fn).reshape(2, -1)


def random_fp8(rows: int, cols: int, seed: int) -> FP8Weight:
    gen = torch.Generator().manual_seed(seed)
    w = (torch.randn(rows, cols, generator=gen) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
    w.view(torch.uint8)[0, : min(cols, 8)] = torch.arange(min(cols, 8), dtype=torch.uint8)  # subnormals
    scale = torch.rand(rows, generator=gen) * 0.01 + 0.001
    return FP8Weight(w, scale, rows, cols)


@pytest.mark.parametrize("impl,dtype", CASES)
def test_every_finite_code_is_exact(impl, dtype):
    require(impl)
    weight = every_finite_code()
    n, k = weight.shape
    packed = native.fp8_pack(weight)
    eye = torch.eye(k, dtype=dtype)  # 127 rows: tiles of 8 (or 2) and a remainder, through the scratch
    got = native.fp8_linear(eye, packed, torch.ones(n), n, k, impl=impl)
    assert torch.equal(got.float().T, weight.float())
    assert torch.equal(native.fp8_widen(packed, n, k, dtype).float(), weight.float())


@pytest.mark.parametrize("impl,dtype", CASES)
@pytest.mark.parametrize("rows,cols", [(96, 256), (37, 75), (200, 64)])
@pytest.mark.parametrize("m", [1, 2, 5, 8, 9, 19, 40])
def test_fp8_linear_equals_the_dequantized_product(impl, dtype, rows, cols, m):
    require(impl)
    weight = random_fp8(rows, cols, seed=rows + m)
    gen = torch.Generator().manual_seed(m)
    x = torch.randn(m, cols, generator=gen).to(dtype)
    bias = torch.randn(rows, generator=gen).to(dtype)
    packed = native.fp8_pack(weight.weight)
    got = native.fp8_linear(x, packed, weight.scale, rows, cols, bias, impl=impl)
    assert got.dtype == dtype and got.shape == (m, rows)
    want = x.double() @ weight.dequantize().double().T + bias.double()
    err = ((got.double() - want).abs().max() / want.abs().max()).item()
    assert err < (1e-5 if dtype == torch.float32 else 8e-3), err


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_takes_every_row_count(dtype, monkeypatch):
    """The seam's kernel: the native product up to its row bound, the widened dense one above."""
    from tgi.backends.cpu.quant_linear import FP8NativeKernel

    monkeypatch.setenv("TGI_CPU_FP8_WIDE_ROWS", "4")
    weight = random_fp8(48, 64, seed=3)
    kernel = FP8NativeKernel(weight, dtype)
    assert kernel.release_source() and kernel.max_rows is None and "float8" in kernel.name
    for m in (1, 4, 5, 33):
        x = torch.randn(m, 64).to(dtype)
        want = x.double() @ weight.dequantize().double().T
        err = ((kernel(x, None).double() - want).abs().max() / want.abs().max()).item()
        assert err < (1e-5 if dtype == torch.float32 else 1.6e-2), (m, err)


def test_nan_codes_are_refused():
    from tgi.backends.cpu.quant_linear import FP8NativeKernel

    weight = random_fp8(16, 32, seed=0)
    weight.weight.view(torch.uint8)[3, 5] = 0xFF
    with pytest.raises(UnsupportedError, match="NaN"):
        FP8NativeKernel(weight, torch.bfloat16)
    with pytest.raises(RuntimeError, match="NaN codes"):
        native.fp8_pack(weight.weight)
