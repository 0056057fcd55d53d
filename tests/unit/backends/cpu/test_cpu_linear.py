"""Prepacked bfloat16 linears give the plain product's results, and only small inputs take that path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.backends.cpu.linear import MAX_PACKED_ROWS, PackedLinearKernel, prepack_linears, prepacking_supported
from tgi.core.models.layers import Linear, MergedLinear

pytestmark = [
    pytest.mark.skipif(not prepacking_supported(), reason="this torch build has no oneDNN prepacking"),
    # oneDNN packs bfloat16 weights only for AVX-512 (or AVX-NE-CONVERT) CPUs; the backend packs only where
    # the CPU has AVX512-BF16 (CpuBackend.prepare_model), so an AVX2-only CPU never reaches this code
    pytest.mark.skipif(
        not cpu_info().has_avx512_bf16,
        reason="this CPU has no AVX512-BF16: bfloat16 weights are not prepacked",
    ),
]


@pytest.mark.parametrize("rows", [1, 3, MAX_PACKED_ROWS, MAX_PACKED_ROWS + 1, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_kernel_equals_the_plain_product(rows, bias):
    torch.manual_seed(rows)
    weight = torch.randn(96, 64).bfloat16()
    b = torch.randn(96).bfloat16() if bias else None
    x = torch.randn(rows, 64).bfloat16()
    kernel = PackedLinearKernel(weight)
    torch.testing.assert_close(kernel(x, b), F.linear(x, weight, b), rtol=1e-2, atol=1e-2)


def test_prepack_attaches_kernels_to_bfloat16_linears_only():
    model = torch.nn.Sequential(
        Linear(8, 8, bias=False, dtype=torch.bfloat16),
        MergedLinear(8, [4, 4], ["a", "b"], bias=True, dtype=torch.bfloat16),
        Linear(8, 8, bias=False),  # float32: untouched
        torch.nn.Linear(8, 8).bfloat16(),  # not a core linear: untouched
    )
    assert prepack_linears(model) == 2
    assert isinstance(model[0].linear_kernel, PackedLinearKernel) and model[2].linear_kernel is None
    x = torch.randn(2, 8).bfloat16()
    expected = F.linear(x, model[1].weight, model[1].bias)
    torch.testing.assert_close(model[1](x), expected, rtol=1e-2, atol=1e-2)
