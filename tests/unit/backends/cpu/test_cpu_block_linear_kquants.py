"""The CPU block linear over the formats of llama.cpp's K-quant files: the K-quants (Q4_K, Q5_K, Q6_K) and
Q5_0 / Q5_1 (what those files hold where a width is no multiple of 256), against `gguf`'s own
dequantization in float64, on each path this CPU has (AVX512-BF16, the scalar reference, float32
activations); the reference quantizer (`tgi.core.testing.kquants`) against `gguf`'s dequantization."""

from __future__ import annotations

import functools

import gguf
import gguf.quants
import numpy as np
import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

from tgi.backends.cpu import native
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.core.loading.block_weights import BlockWeight
from tgi.core.testing.kquants import K_QUANTS, quantize_k

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)

QTYPES = [*sorted(K_QUANTS), "Q5_0", "Q5_1"]
#: the /proc/cpuinfo flags each path needs
CPU_FLAGS = {
    "reference": (),
    "avx512-bf16": ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "f16c", "fma"),
    "amx": ("amx_tile", "amx_bf16", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "f16c", "fma"),
    "auto-f32": ("avx2", "fma", "f16c"),
}


def require(impl: str) -> None:
    missing = [flag for flag in CPU_FLAGS[impl] if flag not in cpu_info().flags]
    if missing:
        pytest.skip(f"{MISSING_CPU_FEATURE}: {', '.join(missing)}")
    if impl in ("avx512-bf16", "amx"):
        assert impl in native.block_impls(), (
            f"this CPU has {', '.join(CPU_FLAGS[impl])}, the kernels miss {impl}"
        )


def k_blocks(qtype: str, rows: int, cols: int, seed: int) -> BlockWeight:
    """Gaussian weights (with a few outliers, as trained weights have) quantized by the reference quantizer
    (K-quants) or `gguf`'s (Q5_0, Q5_1)."""
    g = np.random.default_rng(seed)
    w = g.standard_normal((rows, cols)).astype(np.float32) * 0.05
    w[g.random((rows, cols)) < 0.01] *= 8
    if qtype in K_QUANTS:
        raw = quantize_k(w, qtype)
    else:
        raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType[qtype])
    return BlockWeight(qtype, torch.from_numpy(np.ascontiguousarray(raw)), rows, cols)


@pytest.mark.parametrize("qtype", sorted(K_QUANTS))
def test_reference_quantizer_writes_what_gguf_dequantizes(qtype):
    g = np.random.default_rng(0)
    w = g.standard_normal((32, 512)).astype(np.float32)
    block = BlockWeight(qtype, torch.from_numpy(quantize_k(w, qtype)), 32, 512)
    error = (block.dequantize().numpy() - w).std() / w.std()
    # relative RMS error of 4, 5 and 6 bits (measured 0.078, 0.038, 0.019)
    assert error < {"Q4_K": 0.1, "Q5_K": 0.05, "Q6_K": 0.025}[qtype], error


SHAPES = [(16, 256), (40, 512), (200, 1536)]
CASES = [
    (q, r, c) for q in QTYPES for r, c in SHAPES + ([] if q in K_QUANTS else [(24, 32), (40, 96), (20, 576)])
]


def spread(rows_by_impl: dict[str, list[int]]) -> list[tuple]:
    """Every case on every path, with that path's row counts taken in turn over the cases."""
    return [
        (impl, *case, ms[i % len(ms)]) for impl, ms in rows_by_impl.items() for i, case in enumerate(CASES)
    ]


@functools.cache
def cached_blocks(qtype: str, rows: int, cols: int) -> BlockWeight:
    return k_blocks(qtype, rows, cols, seed=rows)


# AVX512-BF16: tiles of 8 rows, then a tail of 1-7 (1, 3, 8: none, 13: 5, 37: 5); the reference: any count
@pytest.mark.parametrize(
    ("impl", "qtype", "rows", "cols", "m"),
    spread({"reference": [1, 13, 37], "avx512-bf16": [1, 3, 8, 13, 37]}),
)
def test_k_quant_block_linear_equals_the_dequantized_product(qtype, rows, cols, m, impl):
    require(impl)
    block = cached_blocks(qtype, rows, cols)
    w = block.dequantize().double()  # gguf's dequantization
    torch.manual_seed(m)
    x = torch.randn(m, cols).bfloat16()
    bias = torch.randn(rows).bfloat16()
    packed = native.block_pack(block.data, qtype, rows, cols)
    y = native.block_linear(x, packed, qtype, rows, cols, bias, impl=impl)
    assert y.dtype == torch.bfloat16 and y.shape == (m, rows)
    expected = x.double() @ w.T + bias.double()
    # the exact weights, float32 sums, one bfloat16 rounding of the output (2^-8 relative)
    torch.testing.assert_close(y.double(), expected, rtol=2**-8, atol=1e-3 * expected.abs().max().item())


@pytest.mark.parametrize(
    ("impl", "qtype", "rows", "cols", "m"), spread({"auto": [1, 5, 16], "reference": [1, 5, 16]})
)
def test_float32_k_quant_block_linear_equals_the_dequantized_product(qtype, rows, cols, m, impl):
    """float32 activations (CPUs without bfloat16 arithmetic): one loop nest, cloned for AVX-512 / AVX2 /
    plain x86-64; this CPU runs its AVX-512 clone under both names. Where "auto" is the int8 path (AVX2
    without AVX512-VNNI) the loop nest is checked as "reference", "auto" in test_cpu_block_linear_kquant_avx2.py."""
    if impl == "auto":
        require("auto-f32")
        impls = native.block_impls()
        if qtype in K_QUANTS and "avx2-int8" in impls and "avx512-vnni" not in impls:
            pytest.skip("auto computes float32 K-quants on int8 inputs here (avx2-int8)")
    block = cached_blocks(qtype, rows, cols)
    w = block.dequantize().double()
    torch.manual_seed(m)
    x = torch.randn(m, cols)
    bias = torch.randn(rows)
    packed = native.block_pack(block.data, qtype, rows, cols)
    y = native.block_linear(x, packed, qtype, rows, cols, bias, impl=impl)
    assert y.dtype == torch.float32 and y.shape == (m, rows)
    expected = x.double() @ w.T + bias.double()
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())


@pytest.mark.parametrize("qtype", QTYPES)
def test_amx_refuses_k_quants_and_auto_computes_them(qtype):
    """No AMX path for these (docs/backends/cpu.md): asking for it fails with the reason, and
    "auto" on an AMX CPU (which has AVX512-BF16) computes them on the AVX512-BF16 path, for any rows, or
    the K-quants on the int8 path where the CPU has AVX512-VNNI (test_cpu_block_linear_kquant_int8.py)."""
    require("amx")
    block = k_blocks(qtype, 40, 512, seed=3)
    packed = native.block_pack(block.data, qtype, 40, 512)
    x = torch.randn(37, 512).bfloat16()
    with pytest.raises(RuntimeError, match="computes Q4_0, Q4_1 and Q8_0, not Q5_0, Q5_1 or K-quants"):
        native.block_linear(x, packed, qtype, 40, 512, impl="amx")
    auto = native.block_linear(x, packed, qtype, 40, 512, impl="auto")
    int8 = qtype in K_QUANTS and "avx512-vnni" in native.block_impls()
    path = "avx512-vnni" if int8 else "avx512-bf16"
    assert torch.equal(auto, native.block_linear(x, packed, qtype, 40, 512, impl=path))


def test_k_quant_packing_sizes_and_refusals():
    block = k_blocks("Q4_K", 20, 512, seed=0)
    packed = native.block_pack(block.data, "Q4_K", 20, 512)
    assert packed.numel() == 2 * 2 * 16 * 148  # 2 groups of 16 rows x 2 super-blocks x 148 bytes per row
    with pytest.raises(RuntimeError, match="multiple of 256"):
        native.block_pack(torch.zeros(16, 9 * 18, dtype=torch.uint8), "Q6_K", 16, 288)
    with pytest.raises(RuntimeError, match="do not match"):
        native.block_linear(torch.randn(2, 512).bfloat16(), packed, "Q4_K", 48, 512)
    with pytest.raises(ValueError, match="does not hold"):
        BlockWeight("Q5_K", torch.zeros(4, 176, dtype=torch.uint8), 4, 288)
