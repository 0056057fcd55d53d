"""The K-quants' int8 path of the CPU block linear (`impl="avx512-vnni"`,
native/block_linear_kquant_avx512_vnni.cpp): the input quantized per row and 32 columns to int8 (one scale per
K-quant sub-block of 32; llama.cpp's q8_K takes one per 256), integer products with the weights' integers.
Checked against a float64 model of that arithmetic on `gguf`'s dequantized weights, against the exact-input
product within the stated bound (half an input step per column, weighted by |w|), for rows that do not
depend on the rows beside them, and for its refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE
from test_cpu_block_linear_kquants import k_blocks

from tgi.backends.cpu import native
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.core.testing.kquants import K_QUANTS

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)

#: the /proc/cpuinfo flags the path needs (it stores its sums with the AVX512-BF16 rounding)
VNNI_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512vbmi", "avx512_bf16", "f16c", "fma")
SHAPES = [(16, 256), (40, 512), (200, 1536)]


def require_vnni() -> None:
    missing = [flag for flag in VNNI_FLAGS if flag not in cpu_info().flags]
    if missing:
        pytest.skip(f"{MISSING_CPU_FEATURE}: {', '.join(missing)}")
    assert "avx512-vnni" in native.block_impls(), "this CPU has AVX512-VNNI, the kernels miss the int8 path"


#: the columns of one input scale on this path (the AVX2 path's q8_K: 256)
VNNI_SCALE_COLS = 32


def q8k(x: torch.Tensor, cols: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """x [m, k] (bfloat16 or float32) quantized to int8 per row and `cols` columns (256: llama.cpp's
    q8_K), in float32 as the kernels do: the integers [m, k] and the scale of each row's `cols` columns
    [m, k / cols]."""
    xs = x.float().numpy().reshape(x.shape[0], -1, cols)
    amax = np.abs(xs).max(axis=2, keepdims=True)
    iscale = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    q = np.clip(np.rint(xs * iscale), -127, 127)
    return q.reshape(x.shape), (amax[..., 0] / np.float32(127)).astype(np.float32)


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("m", [1, 2, 3, 8, 13, 37])
@pytest.mark.parametrize("qtype", sorted(K_QUANTS))
def test_int8_k_quant_block_linear_is_the_q8k_product(qtype, rows, cols, m):
    """Equal, up to float32 sums and the output's bfloat16 rounding, to sum over 32-column blocks of
    dx * (q8 @ W^T) with W gguf's dequantization: the integers and their scales are the ones meant."""
    require_vnni()
    block = k_blocks(qtype, rows, cols, seed=rows + m)
    w = block.dequantize().double().numpy()
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(m)).bfloat16()
    bias = torch.randn(rows).bfloat16()
    packed = native.block_pack(block.data, qtype, rows, cols)
    y = native.block_linear(x, packed, qtype, rows, cols, bias, impl="avx512-vnni")
    assert y.dtype == torch.bfloat16 and y.shape == (m, rows)
    q, dx = q8k(x, VNNI_SCALE_COLS)
    xq = (q.reshape(m, -1, VNNI_SCALE_COLS) * dx[..., None].astype(np.float64)).reshape(m, cols)
    expected = torch.from_numpy(xq @ w.T) + bias.double()
    torch.testing.assert_close(y.double(), expected, rtol=2**-8, atol=1e-4 * expected.abs().max().item())


@pytest.mark.parametrize("rows,cols", SHAPES)
@pytest.mark.parametrize("qtype", sorted(K_QUANTS))
def test_int8_k_quant_error_against_the_exact_input_is_bounded(qtype, rows, cols):
    """The accuracy cost of int8 inputs: each output is off the exact-input product x W^T by at most
    sum over 32-column blocks of (dx / 2) * sum |w| (plus the output's bfloat16 rounding); on Gaussian
    inputs the relative RMS error stays under 1 % (about 4x that of rounding the input to bfloat16)."""
    require_vnni()
    m = 8
    block = k_blocks(qtype, rows, cols, seed=rows)
    w = block.dequantize().double().numpy()
    x = torch.randn(m, cols, generator=torch.Generator().manual_seed(1)).bfloat16()
    packed = native.block_pack(block.data, qtype, rows, cols)
    y = native.block_linear(x, packed, qtype, rows, cols, None, impl="avx512-vnni").double().numpy()
    exact = x.double().numpy() @ w.T
    _, dx = q8k(x, VNNI_SCALE_COLS)
    bound = (np.abs(w).reshape(rows, -1, VNNI_SCALE_COLS).sum(axis=2) @ (dx.astype(np.float64) / 2).T).T
    assert np.all(np.abs(y - exact) <= bound + 2**-8 * np.abs(exact) + 1e-6), np.abs(y - exact).max()
    rms = np.sqrt(((y - exact) ** 2).mean() / (exact**2).mean())
    assert rms < 0.01, rms


@pytest.mark.parametrize("qtype", sorted(K_QUANTS))
def test_int8_k_quant_rows_do_not_depend_on_the_batch(qtype):
    """Each row is quantized alone and its integer sums are exact: a row's output is the same bits
    alone or beside any number of others (tiles of 8, 2 and 1 rows)."""
    require_vnni()
    rows, cols = 40, 512
    block = k_blocks(qtype, rows, cols, seed=5)
    packed = native.block_pack(block.data, qtype, rows, cols)
    x = torch.randn(19, cols, generator=torch.Generator().manual_seed(3)).bfloat16()
    whole = native.block_linear(x, packed, qtype, rows, cols, None, impl="avx512-vnni")
    for i in range(x.shape[0]):
        alone = native.block_linear(x[i : i + 1], packed, qtype, rows, cols, None, impl="avx512-vnni")
        assert torch.equal(whole[i : i + 1], alone), i
    pair = native.block_linear(x[3:5], packed, qtype, rows, cols, None, impl="avx512-vnni")
    assert torch.equal(whole[3:5], pair)


def test_auto_takes_the_int8_path_for_k_quants_only():
    require_vnni()
    x = torch.randn(3, 512).bfloat16()
    block = k_blocks("Q4_K", 32, 512, seed=1)
    packed = native.block_pack(block.data, "Q4_K", 32, 512)
    auto = native.block_linear(x, packed, "Q4_K", 32, 512, impl="auto")
    assert torch.equal(auto, native.block_linear(x, packed, "Q4_K", 32, 512, impl="avx512-vnni"))
    q5 = k_blocks("Q5_0", 32, 512, seed=1)
    q5_packed = native.block_pack(q5.data, "Q5_0", 32, 512)
    with pytest.raises(RuntimeError, match="computes Q4_K, Q5_K and Q6_K"):
        native.block_linear(x, q5_packed, "Q5_0", 32, 512, impl="avx512-vnni")
    assert torch.equal(
        native.block_linear(x, q5_packed, "Q5_0", 32, 512, impl="auto"),
        native.block_linear(x, q5_packed, "Q5_0", 32, 512, impl="avx512-bf16"),
    )


def test_int8_path_refused_where_the_cpu_lacks_it():
    if "avx512-vnni" in native.block_impls():
        pytest.skip("this CPU has the int8 path (the refusal needs one without AVX512-VNNI)")
    block = k_blocks("Q4_K", 16, 256, seed=0)
    packed = native.block_pack(block.data, "Q4_K", 16, 256)
    with pytest.raises(RuntimeError, match="no AVX512-VNNI"):
        native.block_linear(torch.randn(1, 256).bfloat16(), packed, "Q4_K", 16, 256, impl="avx512-vnni")


def test_bfloat16_k_quants_take_every_row_count_on_vnni_without_amx(monkeypatch):
    """Where the CPU has AVX512-VNNI and no AMX, bfloat16 models compute their K-quants on int8 inputs at every
    row count (no dense copy: `standalone_block_types`); the formats of 32-weight blocks, AMX CPUs and a row
    limit or implementation asked for keep 64 rows and the dense copy above them."""
    from tgi.backends.cpu import linear
    from tgi.backends.cpu.linear import block_rows

    monkeypatch.delenv("TGI_CPU_BLOCK_ROWS", raising=False)
    monkeypatch.setattr(linear, "BLOCK_IMPL", "auto")
    vnni = ["reference", "avx512-bf16", "avx512-vnni"]
    amx = ["reference", "avx512-bf16", "amx", "avx512-vnni"]
    for qtype in K_QUANTS:
        assert block_rows("bfloat16", vnni, qtype) is None, qtype
        assert block_rows("bfloat16", amx, qtype) == 64, qtype
    assert block_rows("bfloat16", vnni, "Q4_1") == block_rows("bfloat16", vnni) == 64
    assert block_rows("bfloat16", ["reference", "avx512-bf16"], "Q4_K") == 64  # no int8 path
    monkeypatch.setenv("TGI_CPU_BLOCK_ROWS", "32")
    assert block_rows("bfloat16", vnni, "Q4_K") == 32
    monkeypatch.delenv("TGI_CPU_BLOCK_ROWS")
    monkeypatch.setattr(linear, "BLOCK_IMPL", "avx512-bf16")
    assert block_rows("bfloat16", vnni, "Q4_K") == 64


def test_a_k_quant_model_on_vnni_keeps_no_dense_copy():
    """The backend's view of the rule above on this CPU: the K-quants are standalone block types in bfloat16
    exactly where the int8 path takes every row count."""
    from tgi.backends.cpu.backend import CpuBackend
    from tgi.backends.cpu.linear import k_int8_every_row

    standalone = CpuBackend().standalone_block_types("bfloat16")
    every_row = k_int8_every_row(native.block_impls())
    for qtype in K_QUANTS:
        assert (qtype in standalone) == every_row, qtype
