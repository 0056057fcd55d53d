"""A fused linear whose parts are stored in different formats: each part runs its own kernel
(`RowParts`, `RowPartsKernel`), never a dense copy."""

from __future__ import annotations

import pytest
import torch

from tgi.backends.cpu.backend import CpuBackend
from tgi.core.interfaces import UnsupportedError
from tgi.core.quant.kernels import RowPartsKernel, backend_kernel
from tgi.core.quant.quantize_dense import quantize_fp8, quantize_int8
from tgi.core.quant.weights import Int8Weight, RowParts


def _parts():
    g = torch.Generator().manual_seed(0)
    q = quantize_int8(torch.randn(48, 64, generator=g))  # e.g. q and k in one format ...
    v = quantize_fp8(torch.randn(16, 64, generator=g))  # ... v in another
    return q, v


def test_row_parts_stand_for_the_stacked_weight():
    q, v = _parts()
    parts = RowParts.of([q, v])
    assert (parts.rows, parts.cols, parts.format) == (64, 64, "int8+fp8")
    assert torch.equal(parts.dequantize(), torch.cat([q.dequantize(), v.dequantize()]))
    assert parts.nbytes == q.nbytes + v.nbytes
    with pytest.raises(ValueError, match="same width"):
        RowParts.of([q, quantize_int8(torch.randn(8, 32))])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_each_part_runs_the_backend_kernel_for_its_format(dtype):
    q, v = _parts()
    kernel = backend_kernel(CpuBackend(), RowParts.of([q, v]), dtype)
    assert isinstance(kernel, RowPartsKernel) and len(kernel.kernels) == 2
    x = torch.randn(5, 64).to(getattr(torch, dtype))
    bias = torch.randn(64).to(x.dtype)
    want = x.float() @ torch.cat([q.dequantize(), v.dequantize()]).T + bias.float()
    got = kernel(x, bias)
    assert got.shape == (5, 64) and got.dtype == x.dtype
    tol = 1e-3 if dtype == "float32" else 0.1
    torch.testing.assert_close(got.float(), want, atol=tol * want.abs().max().item(), rtol=0)


def test_a_part_in_a_format_the_backend_lacks_is_refused_by_name():
    class Int8Only(CpuBackend):
        def weight_formats(self, dtype):
            return {k: v for k, v in super().weight_formats(dtype).items() if k == "int8"}

    q, v = _parts()
    with pytest.raises(UnsupportedError, match="no kernel for fp8"):
        backend_kernel(Int8Only(), RowParts.of([q, v]), "float32")


def test_parts_take_the_rows_every_part_takes():
    class Part:
        def __init__(self, max_rows):
            self.name, self.max_rows = "k", max_rows

    assert RowPartsKernel([Part(None), Part(None)]).max_rows is None
    assert RowPartsKernel([Part(64), Part(None), Part(16)]).max_rows == 16


def test_fused_parts_in_one_format_still_concatenate():
    from tgi.core.models.base import _fused

    a, b = quantize_int8(torch.randn(8, 32)), quantize_int8(torch.randn(4, 32))
    fused = _fused([a, b])
    assert isinstance(fused, Int8Weight) and fused.rows == 12
    q, v = _parts()
    assert isinstance(_fused([q, v]), RowParts)
