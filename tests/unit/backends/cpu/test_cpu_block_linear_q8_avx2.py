"""Q4_0, Q4_1 and Q8_0 on int8 inputs with AVX2 (`impl="avx2-int8"`, native/block_linear_q8_avx2.cpp): the
input quantized per row and block of 32 columns to int8 with a float32 scale (llama.cpp's q8_0, and q8_1's
block sum for Q4_1's offset term), integer products with `vpmaddubsw` / `vpmaddwd`. Checked bit for bit
against an integer model of that arithmetic (the weights' integers and fp16 scales read from the raw
blocks), against the exact-input product within the stated bound, for rows that do not depend on the rows
beside them or on the thread count; "auto" keeps the exact-input product (the int8 path is asked for by name)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from avx2_int8_checks import assert_integer_product, assert_rows_do_not_depend_on_the_batch, require_avx2
from test_cpu_block_linear import random_blocks

from tgi.backends.cpu import native
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.core.loading.block_weights import BLOCK_BYTES, BlockWeight

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)

QTYPES = ["Q4_0", "Q4_1", "Q8_0"]
#: the /proc/cpuinfo flags the path needs
#: (rows, cols): one group and one block; rows not a multiple of 16; 13 groups (not a multiple of the
#: threads) over the default model's width of 576
SHAPES = [(16, 32), (40, 96), (200, 576)]


def q8_32(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """x [m, k] quantized per row and 32 columns as the kernel does, in float32: iscale = 127 / amax,
    x8 = nearest-even(x * iscale) clamped to +-127, dx = amax / 127. Returns x8 [m, k / 32, 32] (int64)
    and dx [m, k / 32] (float32)."""
    xs = x.float().numpy().reshape(x.shape[0], -1, 32)
    amax = np.abs(xs).max(axis=2, keepdims=True)
    iscale = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    q = np.clip(np.rint(xs * iscale), -127, 127).astype(np.int64)
    return q, (amax[..., 0] / np.float32(127)).astype(np.float32)


def integer_parts(block: BlockWeight) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From the raw blocks: per weight the stored integer [rows, k / 32, 32] (Q4: the nibble 0..15, Q8_0:
    signed), per row and block the float32 d and m (m = 0 but for Q4_1)."""
    qtype, rows, cols = block.qtype, block.rows, block.cols
    raw = block.data.numpy().reshape(rows, cols // 32, BLOCK_BYTES[qtype])
    d = raw[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    m = (
        raw[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        if qtype == "Q4_1"
        else np.zeros_like(d)
    )
    if qtype == "Q8_0":
        q = raw[..., 2:34].view(np.int8).astype(np.int64)
    else:
        qs = raw[..., 4:20] if qtype == "Q4_1" else raw[..., 2:18]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int64)  # columns 0-15, then 16-31
    return q, d, m


def int8_model(x: torch.Tensor, block: BlockWeight) -> np.ndarray:
    """The kernel's arithmetic: per block b exact integer sums acc = sum(q x8) (Q4_0: - 8 sum(x8)), then in
    float32, each FMA rounded once: y = fma(acc, d dx, y), and for Q4_1 y = fma(sum(x8), m dx, y)."""
    x8, dx = q8_32(x)
    q, d, mins = integer_parts(block)
    y = np.zeros((x.shape[0], block.rows), np.float32)
    for b in range(block.cols // 32):
        acc = x8[:, b] @ q[:, b].T  # [m, rows], exact
        s = x8[:, b].sum(axis=1)[:, None]
        if block.qtype == "Q4_0":
            acc = acc - 8 * s
        scale = d[None, :, b] * dx[:, b, None]  # float32 products
        # float64: acc (< 2^17) times a float32 is exact, so one rounding to float32 as the FMA's
        y = (acc.astype(np.float64) * scale + y).astype(np.float32)
        if block.qtype == "Q4_1":
            y = (s.astype(np.float64) * (mins[None, :, b] * dx[:, b, None]) + y).astype(np.float32)
    return y


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 13, 16, 37])
@pytest.mark.parametrize("qtype", QTYPES)
def test_avx2_int8_is_the_integer_product(qtype, rows, cols, m):
    """float32 x: the same bits as the integer model (a block of zeros included); bfloat16 x: that result
    plus the bias, rounded once to bfloat16."""
    require_avx2()
    block = random_blocks(qtype, rows, cols, seed=rows + m)
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(m))
    x[0, :32] = 0.0
    assert_integer_product(x, block, torch.randn(rows), int8_model)


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("qtype", QTYPES)
def test_avx2_int8_error_against_the_exact_input_is_bounded(qtype, rows, cols):
    """The accuracy cost of int8 inputs: each output within sum over blocks of (dx / 2) * sum |w| of the
    float32 product x W^T (each input off by at most half its block's step dx), plus 1e-5 relative for the
    float32 sums; on Gaussian inputs the relative RMS error is ~0.5 % (bound: 1 %)."""
    require_avx2()
    m = 8
    block = random_blocks(qtype, rows, cols, seed=rows)
    w = block.dequantize().double().numpy()
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(1))
    packed = native.block_pack(block.data, qtype, rows, cols)
    y = native.block_linear(x, packed, qtype, rows, cols, None, impl="avx2-int8").double().numpy()
    exact = x.double().numpy() @ w.T
    _, dx = q8_32(x)
    bound = (np.abs(w).reshape(rows, -1, 32).sum(axis=2) @ (dx.astype(np.float64) / 2).T).T
    assert np.all(np.abs(y - exact) <= bound + 1e-5 * np.abs(exact) + 1e-6), np.abs(y - exact).max()
    rms = np.sqrt(((y - exact) ** 2).mean() / (exact**2).mean())
    assert rms < 0.01, rms


@pytest.mark.parametrize("qtype", QTYPES)
def test_avx2_int8_rows_do_not_depend_on_the_batch(qtype):
    """Each row is quantized alone and its integer sums are exact: a row's output is the same bits alone or
    beside others (tiles of 4, 3, 2 and 1 rows)."""
    require_avx2()
    rows, cols = 40, 576
    block = random_blocks(qtype, rows, cols, seed=5)
    x = torch.randn(19, cols, generator=torch.Generator().manual_seed(3))
    assert_rows_do_not_depend_on_the_batch(x, block, ((3, 2), (3, 3), (6, 5)))


@pytest.mark.parametrize("qtype", QTYPES)
def test_avx2_int8_threads_split_the_groups_not_the_sums(qtype):
    """The threads share out the groups of 16 output rows (13 here, not a multiple of 2 or 3 threads): the
    same bits with one thread, two or three, and those of the integer model."""
    require_avx2()
    rows, cols = 200, 576
    block = random_blocks(qtype, rows, cols, seed=7)
    packed = native.block_pack(block.data, qtype, rows, cols)
    x = torch.randn(6, cols, generator=torch.Generator().manual_seed(4))
    threads = torch.get_num_threads()
    try:
        found = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            found.append(native.block_linear(x, packed, qtype, rows, cols, None, impl="avx2-int8"))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(found[0], y) for y in found[1:])
    assert torch.equal(found[0], torch.from_numpy(int8_model(x, block)))


@pytest.mark.parametrize("qtype", QTYPES)
def test_auto_keeps_the_exact_input_product_and_int8_is_taken_when_asked(qtype):
    """float32 x: "auto" is the exact-input product on every CPU (the float32 parity with transformers that
    the default model, Q4_1 with a Q8_0 head, is held to); avx2-int8 only when named
    (`TGI_CPU_BLOCK_IMPL=avx2-int8`). bfloat16 x never goes to it under "auto". Q5_0 is refused by name."""
    require_avx2()
    rows, cols = 48, 576
    block = random_blocks(qtype, rows, cols, seed=1)
    packed = native.block_pack(block.data, qtype, rows, cols)
    x = torch.randn(2, cols, generator=torch.Generator().manual_seed(6))
    auto = native.block_linear(x, packed, qtype, rows, cols, impl="auto")
    int8 = native.block_linear(x, packed, qtype, rows, cols, impl="avx2-int8")
    exact = x.double() @ block.dequantize().double().T
    torch.testing.assert_close(auto.double(), exact, rtol=1e-5, atol=1e-5 * exact.abs().max().item())
    assert not torch.equal(auto, int8)
    xb = x.bfloat16()
    bf16 = "avx512-bf16" if "avx512-bf16" in native.block_impls() else "reference"  # 2 rows: never AMX
    assert torch.equal(
        native.block_linear(xb, packed, qtype, rows, cols, impl="auto"),
        native.block_linear(xb, packed, qtype, rows, cols, impl=bf16),
    )
    q5 = random_blocks("Q5_0", 32, 64, seed=1)
    q5_packed = native.block_pack(q5.data, "Q5_0", 32, 64)
    with pytest.raises(RuntimeError, match="computes Q4_0, Q4_1, Q8_0"):
        native.block_linear(torch.randn(1, 64), q5_packed, "Q5_0", 32, 64, impl="avx2-int8")


def test_row_limits_and_deterministic_mode_are_the_exact_products(monkeypatch):
    """Float32 models take their 32-weight blocks on the exact-input kernel up to 256 rows where the CPU has no
    AVX-512 (the dense float32 product is AVX2 there too), else 16;
    `--deterministic` keeps "auto" for them (the K-quants alone go to "reference" where "auto" is int8)."""
    from tgi.backends.cpu.linear import block_rows, invariant_block_impl

    monkeypatch.delenv("TGI_CPU_BLOCK_ROWS", raising=False)
    monkeypatch.delenv("TGI_CPU_BLOCK_IMPL", raising=False)
    int8 = ["reference", "avx2-int8"]
    for qtype in (*QTYPES, "Q5_0"):
        assert block_rows("float32", int8, qtype) == (16 if "avx512f" in cpu_info().flags else 256)
        assert block_rows("float32", ["reference", "avx512-bf16", "avx512-vnni", "avx2-int8"], qtype) == 16
        assert invariant_block_impl(qtype, "float32") == "auto"
