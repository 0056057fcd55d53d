"""The K-quants' int8 path on AVX2 (`impl="avx2-int8"`, native/block_linear_kquant_avx2.cpp): the input
quantized per row and 256 columns to int8 (llama.cpp's q8_K; the AVX512-VNNI path scales per 32 columns),
integer products with `vpmaddubsw`. Checked bit for bit against an integer model of that arithmetic (the
weights' integers from `gguf`'s own dequantization of blocks whose d and dmin are set to 1 and 0), against
the exact-input product within the stated bound, for rows that do not depend on the rows beside them, and
for `auto`'s choice on this CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from avx2_int8_checks import assert_integer_product, assert_rows_do_not_depend_on_the_batch, require_avx2
from test_cpu_block_linear_kquant_int8 import q8k
from test_cpu_block_linear_kquants import cached_blocks, k_blocks

from tgi.backends.cpu import native
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.core.loading.block_weights import BlockWeight
from tgi.core.testing.kquants import K_QUANTS

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)

#: the /proc/cpuinfo flags the path needs
#: (rows, cols): rows not a multiple of 16, groups not a multiple of the threads, 1 to 9 super-blocks
SHAPES = [(16, 256), (40, 512), (200, 1536), (33, 2304)]
#: byte offsets of fp16 d (and dmin) in each raw super-block
D_OFFSET = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208, None)}


def integer_parts(block: BlockWeight) -> tuple[np.ndarray, ...]:
    """Per weight the integer sc * q (Q6_K: sc * (q - 32)) and m of its sub-block, as gguf dequantizes
    them with d = 1 and dmin = 0 (then -1 for m), and per row and super-block the float32 d and dmin."""
    qtype, rows, cols = block.qtype, block.rows, block.cols
    raw = block.data.numpy().reshape(rows, cols // 256, K_QUANTS[qtype]).copy()
    d_at, dmin_at = D_OFFSET[qtype]
    d = raw[..., d_at : d_at + 2].copy().view(np.float16)[..., 0].astype(np.float32)
    dmin = np.zeros_like(d) if dmin_at is None else raw[..., 2:4].copy().view(np.float16)[..., 0]

    def dequantized(d_value: float, dmin_value: float) -> np.ndarray:
        edited = raw.copy()
        edited[..., d_at : d_at + 2] = np.array([d_value], np.float16).view(np.uint8)
        if dmin_at is not None:
            edited[..., 2:4] = np.array([dmin_value], np.float16).view(np.uint8)
        flat = torch.from_numpy(edited.reshape(rows, -1))
        return BlockWeight(qtype, flat, rows, cols).dequantize().double().numpy().astype(np.int64)

    scq = dequantized(1.0, 0.0)
    mins = -dequantized(0.0, 1.0) if dmin_at is not None else np.zeros_like(scq)
    return scq, mins, d, dmin.astype(np.float32)


def int8_model(x: torch.Tensor, block: BlockWeight) -> np.ndarray:
    """The kernel's arithmetic: per super-block s exact integer sums, then in float32 (each FMA rounded
    once) y = fma(acc, d dx, y), y = fma(-min, dmin dx, y); Q6_K's -32 is inside acc."""
    m, rows, cols = x.shape[0], block.rows, block.cols
    q, dx = q8k(x)
    q = q.astype(np.int64).reshape(m, -1, 256)
    scq, mins, d, dmin = integer_parts(block)
    scq, mins = scq.reshape(rows, -1, 256), mins.reshape(rows, -1, 256)
    y = np.zeros((m, rows), np.float32)
    for s in range(cols // 256):
        acc = (q[:, s] @ scq[:, s].T).astype(np.float32)  # [m, rows]; |acc| < 2^29, one rounding
        low = (q[:, s] @ mins[:, s].T).astype(np.float32)
        scale = d[None, :, s] * dx[:, s, None]  # float32 products
        y = (acc.astype(np.float64) * scale + y).astype(np.float32)  # float64: products exact
        scale_min = dmin[None, :, s] * dx[:, s, None]
        y = (-low.astype(np.float64) * scale_min + y).astype(np.float32)
    return y


# rows: tiles of 4, then a tail of 1-3 (1, 2, 3, 4: none, 5: 1, 7: 3, 13: 1, 37: 1, 64: none), taken in
# turn over every K-quant at every shape
ROWS = [1, 2, 3, 4, 5, 7, 13, 37, 64]
INT_CASES = [
    (q, *shape, ROWS[i % len(ROWS)])
    for i, (q, shape) in enumerate((q, s) for q in sorted(K_QUANTS) for s in SHAPES)
]


@pytest.mark.parametrize(("qtype", "rows", "cols", "m"), INT_CASES)
def test_avx2_int8_is_the_integer_product(qtype, rows, cols, m):
    """float32 x: the same bits as the integer model (the float64 step before each float32 rounding is
    exact for the product, so the model rounds as the kernel's FMA does); bfloat16 x: that result plus the
    bias, rounded once to bfloat16."""
    require_avx2()
    block = cached_blocks(qtype, rows, cols)
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(m))
    assert_integer_product(x, block, torch.randn(rows), int8_model)


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("qtype", sorted(K_QUANTS))
def test_avx2_int8_error_against_the_exact_input_is_bounded(qtype, rows, cols):
    """The accuracy cost of int8 inputs: each output within sum over super-blocks of (dx / 2) * sum |w|
    of the float32 product x W^T; relative RMS error under 1 %."""
    require_avx2()
    m = 8
    block = cached_blocks(qtype, rows, cols)
    w = block.dequantize().double().numpy()
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(1))
    packed = native.block_pack(block.data, qtype, rows, cols)
    y = native.block_linear(x, packed, qtype, rows, cols, None, impl="avx2-int8").double().numpy()
    exact = x.double().numpy() @ w.T
    _, dx = q8k(x)
    bound = (np.abs(w).reshape(rows, -1, 256).sum(axis=2) @ (dx.astype(np.float64) / 2).T).T
    assert np.all(np.abs(y - exact) <= bound + 1e-5 * np.abs(exact) + 1e-6), np.abs(y - exact).max()
    rms = np.sqrt(((y - exact) ** 2).mean() / (exact**2).mean())
    assert rms < 0.01, rms


@pytest.mark.parametrize("qtype", sorted(K_QUANTS))
def test_avx2_int8_rows_do_not_depend_on_the_batch(qtype):
    """Each row is quantized alone and its sums are exact: a row's output is the same bits alone or beside
    others (tiles of 4, 3, 2 and 1 rows)."""
    require_avx2()
    rows, cols = 40, 512
    block = k_blocks(qtype, rows, cols, seed=5)
    x = torch.randn(19, cols, generator=torch.Generator().manual_seed(3))
    assert_rows_do_not_depend_on_the_batch(x, block, ((3, 3),))


def test_auto_takes_avx2_int8_for_float32_k_quants_here():
    """On a CPU with AVX2 and no AVX512-VNNI, "auto" computes float32 K-quants on int8 inputs; other
    formats keep the float32 AVX2 kernel, and bfloat16 inputs are not sent to it."""
    require_avx2()
    if "avx512-vnni" in native.block_impls():
        pytest.skip("this CPU has AVX512-VNNI: float32 K-quants keep the float32 loop nest there")
    x = torch.randn(3, 512)
    block = k_blocks("Q4_K", 32, 512, seed=1)
    packed = native.block_pack(block.data, "Q4_K", 32, 512)
    auto = native.block_linear(x, packed, "Q4_K", 32, 512, impl="auto")
    assert torch.equal(auto, native.block_linear(x, packed, "Q4_K", 32, 512, impl="avx2-int8"))
    assert not torch.equal(auto, native.block_linear(x, packed, "Q4_K", 32, 512, impl="reference"))
    xb = x.bfloat16()
    assert torch.equal(
        native.block_linear(xb, packed, "Q4_K", 32, 512, impl="auto"),
        native.block_linear(
            xb,
            packed,
            "Q4_K",
            32,
            512,
            impl="reference" if "avx512-bf16" not in native.block_impls() else "avx512-bf16",
        ),
    )
    q5 = k_blocks("Q5_0", 32, 512, seed=1)
    q5_packed = native.block_pack(q5.data, "Q5_0", 32, 512)
    with pytest.raises(RuntimeError, match="computes Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K"):
        native.block_linear(x, q5_packed, "Q5_0", 32, 512, impl="avx2-int8")


def test_float32_k_quants_take_their_rows_and_deterministic_mode_keeps_the_float32_loop(monkeypatch):
    """The int8 path beats the dense float32 product at every size measured where the CPU has no AVX-512 (up
    to 64 rows where it has: [M, 2048] x [2048, 8192] Q4_K, src/tgi/backends/cpu/linear.py), so float32 K-quants use
    the blocks for every row count there (None: no dense copy kept), up to 64 rows elsewhere;
    `--deterministic` keeps the exact-input float32 loop nest for them ("reference"), the others on "auto"."""
    from tgi.backends.cpu.linear import block_rows, invariant_block_impl

    monkeypatch.delenv("TGI_CPU_BLOCK_ROWS", raising=False)
    monkeypatch.delenv("TGI_CPU_BLOCK_IMPL", raising=False)
    int8 = ["reference", "avx2-int8"]
    avx512 = "avx512f" in cpu_info().flags
    assert block_rows("float32", int8, "Q4_K") == (64 if avx512 else None)
    f32_rows = 16 if avx512 else 256  # the float32 AVX2 kernel's, without AVX-512
    assert block_rows("float32", int8, "Q4_1") == block_rows("float32", int8) == f32_rows
    assert block_rows("float32", [*int8[:1], "avx512-bf16", "avx512-vnni", "avx2-int8"], "Q4_K") == 16
    impls = native.block_impls()
    k_impl = invariant_block_impl("Q4_K", "float32")
    assert k_impl == ("reference" if "avx2-int8" in impls and "avx512-vnni" not in impls else "auto")
    assert invariant_block_impl("Q4_1", "float32") == "auto"


def test_the_kernel_plan_names_avx2_int8(monkeypatch):
    """`tgi backends` and `/info`: float32 K-quants on avx2-int8 where it is auto; a CPU with AVX-512 lists
    avx2-int8 too, which never stands for its bfloat16 block kernel."""
    import dataclasses

    from tgi.backends.cpu.kernel_plan import kernel_plan

    for name in ("TGI_CPU_BLOCK_KERNELS", "TGI_CPU_BLOCK_IMPL", "TGI_CPU_BLOCK_ROWS"):
        monkeypatch.delenv(name, raising=False)
    avx2 = dataclasses.replace(cpu_info(), flags=frozenset({"avx2", "fma", "f16c", "bmi1", "bmi2", "movbe"}))
    plan = kernel_plan(avx2, "float32", "cpu-native", True, ["reference", "avx2-int8"], 16, blocks=True)
    assert (
        plan["gguf block linear"]
        == "float32 AVX2 up to 16 rows; K-quants on int8 inputs (avx2-int8) for every row count (no dense copy)"
    )
    vnni = ["reference", "avx512-bf16", "avx512-vnni", "avx2-int8"]
    assert kernel_plan(avx2, "float32", "cpu-native", True, vnni, 16, blocks=True)["gguf block linear"] == (
        "float32 AVX2 up to 16 rows"
    )
    assert kernel_plan(avx2, "bfloat16", "cpu-native", True, vnni, 64)["gguf block linear"] == (
        "avx512-bf16 up to 64 rows; K-quants on int8 inputs (avx512-vnni) for every row count (no dense copy)"
    )
    # asked for by name (Q4_0, Q4_1, Q8_0 on int8 inputs too): the plan says so, not "float32 AVX2"
    monkeypatch.setenv("TGI_CPU_BLOCK_IMPL", "avx2-int8")
    plan = kernel_plan(avx2, "float32", "cpu-native", True, ["reference", "avx2-int8"], 16, blocks=True)
    assert plan["gguf block linear"] == "avx2-int8 up to 16 rows (TGI_CPU_BLOCK_IMPL)"
