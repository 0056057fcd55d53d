"""Quantized linear layers on the Triton backends: the `tgi.core.quant.kernels` seam's kernels over
`kernels/quant_int.py` (GPTQ 4/8-bit, AWQ 4-bit) and `kernels/quant_w8.py` (FP8, int8).

Every kernel takes every row count (`max_rows` None: the layer keeps no dense weight) and computes with the
checkpoint's packed tensors as stored, dequantizing tile by tile inside the GEMM. Formats not in
`WEIGHT_FORMATS` (bitsandbytes NF4/FP4/int8, GGUF blocks) are refused by the seam with these names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tgi.core.interfaces.types import UnsupportedError
from tgi.core.quant.kernels import QuantizedLinearKernel

if TYPE_CHECKING:
    from tgi.core.quant.weights import QuantizedWeight

#: the activation dtypes the kernels take
ACTIVATION_DTYPES = ("bfloat16", "float16", "float32")
#: format -> the kernel that computes it (shown at start-up and in /info)
WEIGHT_FORMATS = {
    "gptq-int4": "triton gptq int4 (dequantize in the GEMM)",
    "gptq-int8": "triton gptq int8 (dequantize in the GEMM)",
    "awq-int4": "triton awq int4 (dequantize in the GEMM)",
    "fp8": "triton fp8 w8a16 (dequantize in the GEMM)",
    "int8": "triton int8 w8a16 (dequantize in the GEMM)",
}


def weight_formats(dtype: str) -> dict[str, str]:
    """`Backend.weight_formats` of the Triton backends: every format above, for 16- and 32-bit activations."""
    return dict(WEIGHT_FORMATS) if dtype in ACTIVATION_DTYPES else {}


class TritonQuantizedLinear(QuantizedLinearKernel):
    """x @ W.T + bias with W one `QuantizedWeight` of a format in `WEIGHT_FORMATS` (see `quantized_linear`)."""

    def __init__(self, weight: QuantizedWeight) -> None:
        self.weight = weight
        self.name = WEIGHT_FORMATS[weight.format]
        self._product = _product_for(weight)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        y = self._product(x)
        return y if bias is None else y.add_(bias)


def quantized_linear(weight: QuantizedWeight, dtype: str) -> TritonQuantizedLinear:
    """`TorchBackend.quantized_linear` of the Triton backends; raises `UnsupportedError` for another format
    or activation dtype."""
    if weight.format not in WEIGHT_FORMATS or dtype not in ACTIVATION_DTYPES:
        supported = ", ".join(WEIGHT_FORMATS)
        raise UnsupportedError(
            f"the Triton quantized kernels compute {supported} with {', '.join(ACTIVATION_DTYPES)} "
            f"activations, not {weight.format} with {dtype}"
        )
    return TritonQuantizedLinear(weight)


def _trivial_groups(g_idx: torch.Tensor | None, group_size: int) -> bool:
    """True when g_idx is input row // group_size (GPTQ checkpoints without act-order store it too): the
    kernel then computes the group instead of reading it."""
    if g_idx is None:
        return True
    expect = torch.arange(g_idx.numel(), device=g_idx.device) // group_size
    return bool(torch.equal(g_idx.long(), expect))


def _product_for(weight: QuantizedWeight):
    from tgi.backends.triton_common.kernels.quant_int import awq_gemm, gptq_gemm
    from tgi.backends.triton_common.kernels.quant_w8 import fp8_gemm, int8_gemm

    fmt = weight.format
    if fmt.startswith("gptq-"):
        w = weight
        g_idx = None if _trivial_groups(w.g_idx, w.group_size) else w.g_idx.to(torch.int32).contiguous()
        offset = 1 if w.zeros_minus_one else 0

        def gptq(x):
            return gptq_gemm(
                x,
                w.qweight,
                w.qzeros,
                w.scales,
                g_idx,
                bits=w.bits,
                group_size=w.group_size,
                zero_offset=offset,
            )

        return gptq
    if fmt == "awq-int4":
        return lambda x: awq_gemm(
            x, weight.qweight, weight.qzeros, weight.scales, group_size=weight.group_size
        )
    if fmt == "fp8":
        return lambda x: fp8_gemm(x, weight.weight, weight.scale)
    return lambda x: int8_gemm(x, weight.weight, weight.scale)
