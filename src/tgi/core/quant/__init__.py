"""Quantized weights, first-class: typed weights (`weights`), the seam through which a linear layer gets a
backend's kernel for its format (`kernels`), which quantization a model loads with (`config`: the
checkpoint's `quantization_config` or `--quantize`), a quantized checkpoint's packed tensors read as stored
(`packed_checkpoint`), dense linears quantized as they load for `--quantize` (`quantize_dense`), and the
steps of one model load that use them (`quantized_loading`).

The framework-free half of the contract (format names, `QuantizationSpec`, `Backend.weight_formats`) is in
`tgi.core.interfaces.quantization`; a torch backend makes kernels in `TorchBackend.quantized_linear`.
"""

from tgi.core.quant.kernels import (
    QuantizedLinearKernel,
    RowSplitKernel,
    attach_quantized_kernels,
    drop_dense_weight,
    quantized_linears,
)
from tgi.core.quant.weights import AWQWeight, FP8Weight, GPTQWeight, Int8Weight, QuantizedWeight

__all__ = [
    "AWQWeight",
    "FP8Weight",
    "GPTQWeight",
    "Int8Weight",
    "QuantizedLinearKernel",
    "QuantizedWeight",
    "RowSplitKernel",
    "attach_quantized_kernels",
    "drop_dense_weight",
    "quantized_linears",
]
