"""The Triton quantized GEMMs (CUDA/ROCm: `kernels.quant_int` for GPTQ and AWQ, `kernels.quant_w8` for FP8 and int8), run on
CPU tensors by triton's interpreter (`TRITON_INTERPRET=1`, set by tests/conftest.py before triton is
imported): weights quantized and packed by the plain-torch references of tests/helpers/quant_formats.py, the kernel's
x @ W.T against x @ dequantized(W).T in float32. Tolerance: relative to the largest |reference| value,
1e-5 for float32 x, 1e-2 for float16, 2e-2 for bfloat16 (the dequantized tile is rounded to x's dtype).
Skipped where a GPU is visible (the kernels then run natively)."""

from __future__ import annotations

import os

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("a GPU is visible: the kernels are not interpreted", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET=1 was not set before triton was imported", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

from quant_formats import IntQuantized, pack_awq, pack_gptq, quantize_fp8, quantize_int, quantize_int8

from tgi.backends.triton_common.kernels.quant_int import awq_gemm, gptq_gemm
from tgi.backends.triton_common.kernels.quant_w8 import fp8_gemm, int8_gemm

TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}
N = 200  # output features: a multiple of 8 (packing), not of the 64-column tile
ROWS = (1, 7, 33)  # ragged against the 16-row tile


def _weight(n: int, k: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.05


def _x(rows: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)).to(dtype)


def _dequantized(qz: IntQuantized, dtype: torch.dtype) -> torch.Tensor:
    """W [N, K] float32 from the scales as the kernel reads them (in x's dtype, as checkpoints store them)."""
    return IntQuantized(qz.q, qz.zeros, qz.scales.to(dtype).float(), qz.g_idx, qz.bits).dequantize()


def _assert_close(got: torch.Tensor, x: torch.Tensor, w_deq: torch.Tensor) -> None:
    want = x.float() @ w_deq.T
    assert got.dtype == x.dtype and got.shape == want.shape
    err = (got.float() - want).abs().max().item()
    assert err <= TOL[x.dtype] * want.abs().max().item(), err


def test_kernels_are_interpreted():
    from tgi.backends.triton_common.kernels import quant_int, quant_w8

    assert type(quant_int._int_gemm_kernel).__name__ == "InterpretedFunction"
    assert type(quant_w8._w8_gemm_kernel).__name__ == "InterpretedFunction"


GPTQ = {  # bits, k, group size, sym, desc_act, v1
    "common": (4, 384, 128, True, False, True),  # the common published checkpoint
    "k-tail": (4, 160, 32, False, False, True),  # K not a multiple of the 64-row tile
    "per-channel-v2": (4, 256, -1, False, False, False),  # per channel, gptq_v2 zero points
    "act-order": (4, 256, 32, False, True, True),  # desc_act: permuted g_idx
    "int8-act-order": (8, 256, 128, True, True, True),
    "int8-g32": (8, 192, 32, False, False, True),
}
#: every case in float32 (the tightest tolerance); each 16-bit dtype on two cases, the same code in every case:
#: float16's tile product in its dtype (the interpreter's only 16-bit product: bfloat16's runs in float32, as
#: float32's) once per branch (whole-group tiles: per-channel-v2; per-row groups: k-tail), bfloat16's loads
#: and rounding on a 4-bit and an 8-bit case (one case per format feature and dtype is a sweep)
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
GPTQ_DTYPES = [
    *((c, F32) for c in GPTQ),
    ("common", BF16), ("int8-act-order", BF16), ("k-tail", F16), ("per-channel-v2", F16),
]  # fmt: skip


def _id(value) -> str:
    return str(value).replace("torch.", "")


@pytest.mark.parametrize(("case", "dtype"), GPTQ_DTYPES, ids=_id)
def test_gptq_equals_dequantized_reference(case, dtype):
    bits, k, group_size, sym, desc_act, v1 = GPTQ[case]
    qz = quantize_int(_weight(N, k), bits, group_size, sym=sym, desc_act=desc_act)
    qweight, qzeros = pack_gptq(qz, v1=v1)
    ref = _dequantized(qz, dtype)
    g_idx = qz.g_idx if desc_act else None
    for rows in ROWS:
        x = _x(rows, k, dtype)
        scales = qz.scales.to(dtype)
        got = gptq_gemm(
            x, qweight, qzeros, scales, g_idx, bits=bits, group_size=group_size, zero_offset=int(v1)
        )
        _assert_close(got, x, ref)
    assert (qz.dequantize() - _weight(N, k)).abs().max() < 0.05  # the quantizer itself is sane


@pytest.mark.parametrize(
    ("k", "group_size", "dtype"),
    [(384, 128, F32), (160, 32, F32), (256, -1, F32), (384, 128, BF16), (160, 32, F16)],  # as GPTQ_DTYPES
    ids=_id,
)
def test_awq_equals_dequantized_reference(k, group_size, dtype):
    qz = quantize_int(_weight(N, k, seed=1), 4, group_size, sym=False)
    qweight, qzeros = pack_awq(qz)
    ref = _dequantized(qz, dtype)
    for rows in ROWS:
        x = _x(rows, k, dtype)
        _assert_close(awq_gemm(x, qweight, qzeros, qz.scales.to(dtype), group_size=group_size), x, ref)


def test_awq_interleave_matters():
    """The same codes packed in plain order give another product: the kernel reads AWQ's interleave."""
    qz = quantize_int(_weight(64, 64, seed=2), 4, -1, sym=False)
    qweight, qzeros = pack_awq(qz, order=tuple(range(8)))
    x = _x(7, 64, torch.float32)
    want = x @ qz.dequantize().T
    got = awq_gemm(x, qweight, qzeros, qz.scales, group_size=-1)
    assert (got - want).abs().max() > 0.1 * want.abs().max()


@pytest.mark.parametrize(
    ("per_channel", "dtype"), [(True, F32), (False, F32), (True, BF16), (False, F16)], ids=_id
)  # as GPTQ_DTYPES
def test_fp8_equals_dequantized_reference(per_channel, dtype):
    k = 160
    w8, scale = quantize_fp8(_weight(N, k, seed=3), per_channel)
    ref = w8.float() * scale
    for rows in ROWS:
        x = _x(rows, k, dtype)
        _assert_close(fp8_gemm(x, w8, scale), x, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_equals_dequantized_reference(dtype):
    k = 160
    w8, scale = quantize_int8(_weight(N, k, seed=4))
    ref = w8.float() * scale
    for rows in ROWS:
        x = _x(rows, k, dtype)
        _assert_close(int8_gemm(x, w8, scale), x, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("split", [2, 5])
def test_split_k_equals_the_reference(dtype, split):
    """Few-row products split along K (decode steps on a GPU; chosen by hand here): the programs' partial
    sums, added into a float32 buffer, give the same product. K = 384 is 6 tiles: 2 programs of 3 tiles, and
    5 asked for is rounded to 3 programs of 2 tiles."""
    k = 384
    qz = quantize_int(_weight(N, k, seed=5), 4, 128, sym=False, desc_act=True)
    qweight, qzeros = pack_gptq(qz)
    awq_qweight, awq_qzeros = pack_awq(quantize_int(_weight(N, k, seed=5), 4, 128, sym=False))
    awq_ref = quantize_int(_weight(N, k, seed=5), 4, 128, sym=False)
    w8, scale = quantize_fp8(_weight(N, k, seed=5), per_channel=True)
    i8, i8_scale = quantize_int8(_weight(N, k, seed=5))
    for rows in (1, 7):
        x = _x(rows, k, dtype)
        s = qz.scales.to(dtype)
        got = gptq_gemm(x, qweight, qzeros, s, qz.g_idx, bits=4, group_size=128, split=split)
        _assert_close(got, x, _dequantized(qz, dtype))
        got = awq_gemm(x, awq_qweight, awq_qzeros, awq_ref.scales.to(dtype), group_size=128, split=split)
        _assert_close(got, x, _dequantized(awq_ref, dtype))
        _assert_close(fp8_gemm(x, w8, scale, split=split), x, w8.float() * scale)
        _assert_close(int8_gemm(x, i8, i8_scale, split=split), x, i8.float() * i8_scale)


def test_split_k_heuristic():
    from tgi.backends.triton_common.kernels.quant_int import split_k

    cpu = torch.device("cpu")
    assert split_k(1, 4096, 4096, cpu) == 1  # never split on CPU tensors unless asked
    assert split_k(1, 4096, 4096, cpu, requested=8) == 8
    assert split_k(1, 4096, 128, cpu, requested=8) == 2  # at most one program per K tile


def test_split_k_is_chosen_per_power_of_two_rows(monkeypatch):
    """On a GPU the split (a kernel variant: split or not) follows the row count rounded up to a power of two,
    so warm-up's row counts 1, 2, 4, ... reach every choice a step can make (no GPU asked: 132 SMs given)."""
    from tgi.backends.triton_common.kernels import quant_int

    gpu = torch.device("cuda", 7)
    monkeypatch.setitem(quant_int._SM_COUNT, 7, 132)
    for m in range(1, 300):
        bucket = quant_int.row_bucket(m)
        assert bucket >= m and bucket & (bucket - 1) == 0
        assert quant_int.split_k(m, 4096, 4096, gpu) == quant_int.split_k(bucket, 4096, 4096, gpu)
    assert quant_int.split_k(1, 4096, 4096, gpu) > 1 and quant_int.split_k(512, 4096, 4096, gpu) == 1


def test_act_order_weights_are_sorted_once():
    """The backend's kernel for act-order GPTQ repacks the rows sorted by group (and releases the stored
    weight); a g_idx whose groups are not whole runs of group_size rows is read as it is."""
    from tgi.backends.triton_common.quant import quantized_linear
    from tgi.core.quant.weights import GPTQWeight

    k = 256
    qz = quantize_int(_weight(N, k, seed=6), 4, 64, sym=False, desc_act=True)
    qweight, qzeros = pack_gptq(qz)
    x, bias = _x(7, k, torch.float32), torch.randn(N)
    kernel = quantized_linear(GPTQWeight(4, qweight, qzeros, qz.scales, qz.g_idx, 64, True, N, k), "float32")
    assert kernel.release_source()
    _assert_close(kernel(x, bias) - bias, x, qz.dequantize())
    g_idx = qz.g_idx.clone()
    g_idx[0] = (g_idx[0] + 1) % 4  # one group one row short, another one long
    uneven = IntQuantized(qz.q, qz.zeros, qz.scales, g_idx, 4)
    kernel = quantized_linear(GPTQWeight(4, qweight, qzeros, qz.scales, g_idx, 64, True, N, k), "float32")
    assert not kernel.release_source()
    _assert_close(kernel(x, None), x, uneven.dequantize())


def test_fp8_decodes_every_finite_byte():
    codes = torch.arange(256, dtype=torch.uint8)
    codes = codes[(codes & 0x7F) != 0x7F]  # the two NaN encodings
    got = fp8_gemm(torch.ones(1, 1), codes.view(torch.float8_e4m3fn).reshape(-1, 1), torch.ones(()))
    assert torch.equal(got[0], codes.view(torch.float8_e4m3fn).float())


def test_bad_inputs_are_refused():
    qz = quantize_int(_weight(64, 64), 4, 32, sym=True)
    qweight, qzeros = pack_gptq(qz)
    with pytest.raises(ValueError, match="4- and 8-bit"):
        gptq_gemm(_x(1, 64, torch.float32), qweight, qzeros, qz.scales, None, bits=3, group_size=32)
    with pytest.raises(ValueError, match=r"x must be \[rows, 64\]"):
        gptq_gemm(_x(1, 63, torch.float32), qweight, qzeros, qz.scales, None, bits=4, group_size=32)
    with pytest.raises(ValueError, match="g_idx must be"):
        gptq_gemm(_x(1, 64, torch.float32), qweight, qzeros, qz.scales, qz.g_idx[:8], bits=4, group_size=32)
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        fp8_gemm(_x(1, 64, torch.float32), torch.zeros(8, 64, dtype=torch.float16), torch.ones(()))
    with pytest.raises(ValueError, match="int8 weights"):
        int8_gemm(_x(1, 64, torch.float32), torch.zeros(8, 64, dtype=torch.uint8), torch.ones(()))
    with pytest.raises(ValueError, match="per channel"):
        fp8_gemm(_x(1, 64, torch.float32), torch.zeros(8, 64, dtype=torch.uint8), torch.ones(3))
