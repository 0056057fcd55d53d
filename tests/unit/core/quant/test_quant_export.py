"""The benchmark's GPTQ writer (`tgi.core.testing.export`) packs as the plain-torch reference packer of
tests/helpers/quant_formats.py does (4 and 8 bits, weights and zero points), and the CPU's float8 kernel widens
every float8 code, zeros and subnormals included, to the value the format defines."""

from __future__ import annotations

import torch
from quant_formats import pack_gptq, quantize_int

from tgi.backends.cpu.quant_linear import FP8BitsKernel
from tgi.core.quant.weights import FP8Weight
from tgi.core.testing.export import _pack_along_rows


def test_gptq_writer_packs_as_the_reference():
    for bits, sym, v1 in ((4, True, True), (8, False, False)):
        qz = quantize_int(torch.randn(48, 64), bits, 32, sym=sym)
        qweight, qzeros = pack_gptq(qz, v1=v1)
        assert torch.equal(_pack_along_rows(qz.q, bits), qweight)
        zeros = (qz.zeros - 1) if v1 else qz.zeros
        assert torch.equal(_pack_along_rows(zeros.T.contiguous(), bits).T, qzeros)


def test_fp8_kernel_widens_every_code_exactly():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    codes = codes[(codes & 0x7F) != 0x7F]  # NaN codes are refused
    weight = codes.view(torch.float8_e4m3fn).reshape(2, -1)  # [2, 127]: every finite value
    kernel = FP8BitsKernel(FP8Weight(weight, torch.ones(2), 2, weight.shape[1]), torch.float32)
    eye = torch.eye(weight.shape[1])
    assert torch.equal(kernel(eye, None).T, weight.float())
