"""The two packed layouts of the K-quants' high bits (native/block_linear_kquant.h): lane masks, which every
path reads, and fields, which the AVX2 int8 path sets in place with a shift and a mask and which `block_pack`
uses for Q5_K and Q6_K where the CPU has no AVX512-BF16. Checked: every path that reads both gives the same
bits from either, the AVX-512 paths refuse fields by name, the CPU kernel packs what this CPU prefers; and the
AVX2 quantization of the input (q8_K) rounds ties and clamps as its scalar loop does."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from avx2_int8_checks import require_avx2
from test_cpu_block_linear_kquant_avx2 import int8_model
from test_cpu_block_linear_kquants import k_blocks

from tgi.backends.cpu import native

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)

#: (rows, cols): rows not a multiple of 16, 1 to 9 super-blocks
SHAPES = [(16, 256), (40, 512), (33, 2304)]
#: the formats with high bits (Q4_K has none: "fields" is refused for it)
HIGH_BIT_TYPES = ["Q5_K", "Q6_K"]


def paths() -> list[tuple[str, torch.dtype]]:
    """(impl, input dtype) pairs this CPU runs that read both layouts."""
    out = [("reference", torch.float32), ("reference", torch.bfloat16)]
    if "avx2-int8" in native.block_impls():
        out += [("avx2-int8", torch.float32), ("avx2-int8", torch.bfloat16), ("auto", torch.float32)]
    return out


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("m", [1, 3, 4, 9])
@pytest.mark.parametrize("qtype", HIGH_BIT_TYPES)
def test_fields_give_the_bits_of_lane_masks(qtype, rows, cols, m):
    block = k_blocks(qtype, rows, cols, seed=rows + m)
    masks = native.block_pack(block.data, qtype, rows, cols)
    fields = native.block_pack(block.data, qtype, rows, cols, "fields")
    assert fields.numel() == masks.numel() and not torch.equal(fields, masks)
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(m))
    bias = torch.randn(rows)
    for impl, dtype in paths():
        xx, bb = x.to(dtype), bias.to(dtype)
        expected = native.block_linear(xx, masks, qtype, rows, cols, bb, impl=impl)
        got = native.block_linear(xx, fields, qtype, rows, cols, bb, impl=impl, layout="fields")
        assert torch.equal(got, expected), (impl, dtype)


@pytest.mark.parametrize("qtype", HIGH_BIT_TYPES)
def test_fields_on_avx2_int8_are_the_integer_product(qtype):
    """Not only equal to the lane masks' result: the integer model of the format, bit for bit."""
    require_avx2()
    rows, cols = 40, 512
    block = k_blocks(qtype, rows, cols, seed=11)
    fields = native.block_pack(block.data, qtype, rows, cols, "fields")
    x = torch.randn(5, cols, generator=torch.Generator().manual_seed(2))
    y = native.block_linear(x, fields, qtype, rows, cols, None, impl="avx2-int8", layout="fields")
    assert torch.equal(y, torch.from_numpy(int8_model(x, block)))


@pytest.mark.parametrize("impl", ["avx512-bf16", "avx512-vnni"])
def test_the_avx512_k_quant_paths_refuse_fields(impl):
    block = k_blocks("Q6_K", 16, 256, seed=1)
    fields = native.block_pack(block.data, "Q6_K", 16, 256, "fields")
    x = torch.randn(2, 256).bfloat16()
    with pytest.raises(RuntimeError, match="read weights packed with lane masks, not fields"):
        native.block_linear(x, fields, "Q6_K", 16, 256, impl=impl, layout="fields")


def test_layout_names_are_checked():
    block = k_blocks("Q4_K", 16, 256, seed=1)
    with pytest.raises(ValueError, match="Q4_K has no high bits to pack as fields"):
        native.block_pack(block.data, "Q4_K", 16, 256, "fields")
    with pytest.raises(ValueError, match="unknown packed layout 'planes'"):
        native.block_pack(block.data, "Q4_K", 16, 256, "planes")


def test_the_cpu_kernel_packs_the_layout_this_cpu_prefers():
    """Fields for Q5_K and Q6_K where no lane-mask-only path runs (no AVX512-BF16), masks elsewhere and for
    the other formats; the kernel's results are the lane masks' bits either way."""
    from tgi.backends.cpu.linear import BlockLinearKernel

    avx512 = "avx512-bf16" in native.block_impls()
    for qtype in ("Q4_K", "Q5_K", "Q6_K"):
        expected = "fields" if qtype in HIGH_BIT_TYPES and not avx512 else "masks"
        assert native.preferred_layout(qtype) == expected
        block = k_blocks(qtype, 40, 512, seed=4)
        kernel = BlockLinearKernel(block, max_rows=None)
        assert kernel.layout == expected
        x = torch.randn(3, 512)
        masks = native.block_pack(block.data, qtype, 40, 512)
        assert torch.equal(kernel(x, None), native.block_linear(x, masks, qtype, 40, 512))
    assert native.preferred_layout("Q4_1") == "masks"


def test_the_input_quantization_rounds_ties_to_even_and_clamps():
    """The AVX2 quantization (q8_K) against its model (`np.rint`, clipping): columns at exact halves of a step
    (amax 127 gives a scale of 1), a row of zeros, and negative maxima, through the integer product."""
    require_avx2()
    rows, cols = 16, 512
    block = k_blocks("Q4_K", rows, cols, seed=3)
    halves = np.arange(-126, 127, dtype=np.float32) + 0.5  # -125.5 .. 126.5: 253 ties
    row0 = np.concatenate([[127.0], halves, [0.5, -0.5], [-127.0], -halves, [1.5, -1.5]]).astype(np.float32)
    row1 = np.zeros(cols, np.float32)
    row2 = -np.abs(np.random.default_rng(0).standard_normal(cols)).astype(np.float32)
    x = torch.from_numpy(np.stack([row0, row1, row2]))
    packed = native.block_pack(block.data, "Q4_K", rows, cols)
    y = native.block_linear(x, packed, "Q4_K", rows, cols, None, impl="avx2-int8")
    assert torch.equal(y, torch.from_numpy(int8_model(x, block)))
    assert torch.equal(y[1], torch.zeros(rows))


def test_k_blocks_cover_every_high_bit_value():
    """The layouts above are compared on weights whose packed fields take every value of their high bits."""
    for qtype, width in (("Q5_K", 1), ("Q6_K", 2)):
        fields = native.block_pack(k_blocks(qtype, 40, 512, seed=41).data, qtype, 40, 512, "fields").numpy()
        units = 3 * 2  # groups of 16 rows x super-blocks
        stride, high_bytes = fields.size // units, 8 * (64 if qtype == "Q5_K" else 128)
        high = np.concatenate(
            [fields[u * stride + 2048 : u * stride + 2048 + high_bytes] for u in range(units)]
        )
        values = {(int(b) >> shift) & ((1 << width) - 1) for b in high for shift in range(0, 8, width)}
        assert values == set(range(1 << width))
