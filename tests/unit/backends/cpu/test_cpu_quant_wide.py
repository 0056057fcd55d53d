"""The CPU's int8 (EETQ) and int4 (GPTQ / AWQ) kernels on both of their paths: aten's weight-only kernels,
and for inputs of more than `WIDE_ROWS` rows the weight widened per call into a temporary of the
activation dtype with the dense product. Both equal the product with `dequantize()`d weights; aten's int4
packing is the one the widening reads on this machine (else the kernel would say so in its name)."""

from __future__ import annotations

import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.backends.cpu.quant_linear import Int4PackKernel, Int8PackKernel, unpack_int4pack
from tgi.core.torch.testing.quant import COLS, ROWS, random_weight

#: max |kernel - reference| / max |reference|, by activation dtype (as the conformance suite's)
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def require_avx512_packing(case: str) -> None:
    """aten packs int4 weights for the widest ISA its CPU dispatch picks; the widening reads the AVX-512 one."""
    if case != "int8" and "avx512f" not in cpu_info().flags:
        pytest.skip(f"{MISSING_CPU_FEATURE}: avx512f (aten's AVX-512 int4 packing)")


def make(case: str, dtype: torch.dtype):
    weight = random_weight(case, torch.device("cpu"))
    if case == "int8":
        return weight, Int8PackKernel(weight.weight, weight.scale, dtype)
    return weight, Int4PackKernel(weight, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["int8", "gptq-int4", "gptq-int4-act-order", "awq-int4"])
@pytest.mark.parametrize("wide_rows", ["0", "100000"])
def test_both_paths_equal_the_dequantized_product(case, dtype, wide_rows, monkeypatch):
    monkeypatch.setenv("TGI_CPU_INT8_WIDE_ROWS", wide_rows)
    monkeypatch.setenv("TGI_CPU_INT4_WIDE_ROWS", wide_rows)
    weight, kernel = make(case, dtype)
    if wide_rows == "0":  # every input widened: the kernel must offer it here
        require_avx512_packing(case)
        assert "widened per call" in kernel.name, kernel.name
    for m in (1, 33):
        gen = torch.Generator().manual_seed(m)
        x = torch.randn(m, COLS, generator=gen).to(dtype)
        bias = (torch.randn(ROWS, generator=gen) * 0.1).to(dtype)
        got = kernel(x, bias)
        assert got.dtype == dtype and got.shape == (m, ROWS)
        want = x.double() @ weight.dequantize().double().T + bias.double()
        err = ((got.double() - want).abs().max() / want.abs().max()).item()
        assert err < TOLERANCE[dtype], (m, err)


@pytest.mark.parametrize("rows", [128, 96, 80, 48])
def test_int4_unpacking_reads_aten_packing(rows):
    require_avx512_packing("int4")
    q = torch.randint(0, 16, (rows, 96), dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    assert torch.equal(unpack_int4pack(packed, rows, 96).int(), q)
