"""The quantized-linear seam: a linear layer with a quantized weight asks the backend for a kernel.

Contract, for a backend author:
- The runner attaches `module.quant_weight` (a `tgi.core.quant.weights.QuantizedWeight`) to the linears of a
  quantized model, then calls `attach_quantized_kernels(model, backend, dtype)` after
  `backend.prepare_model(model)`. For each such linear it calls
  `backend.quantized_linear(weight, dtype)`, which returns a `QuantizedLinearKernel` or raises
  `UnsupportedError` with the reason (never a dequantized dense product in disguise).
- The kernel computes `x @ W.T + bias` for `x` [rows, cols] in the model's dtype (`dtype`), with W the
  weight `weight.dequantize()` stands for, up to the kernel's own rounding (activations rounded to the
  dtype, float32 or better accumulation); it returns [rows, out] in x's dtype.
- `max_rows`: the largest input row count the kernel takes. None (all): the layer's dense weight is
  dropped (`module.weight` becomes a meta tensor of the same shape and dtype: any dense use fails loudly),
  and the model's weight memory falls. A finite `max_rows` (GGUF blocks on the CPU: reading the blocks
  pays for decode batches, the dense product for prefill) keeps the dense weight and its prepared kernel
  for larger inputs: a second copy of the weight in memory, the price of that speed. Weights that come
  without a dense copy (`QuantizedWeight` read from a GPTQ/AWQ/FP8 checkpoint, or quantized at load) need
  a kernel with `max_rows=None`; a finite one is refused.
- The kernel must keep the weight in its quantized form (it may repack it once, at construction, into its
  own layout, and free what it no longer needs); a dequantizing kernel must be asked for by the user.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from tgi.core.interfaces.types import UnsupportedError

if TYPE_CHECKING:
    from tgi.core.quant.weights import QuantizedWeight
    from tgi.core.torch.backend import TorchBackend


class QuantizedLinearKernel(ABC):
    """A backend's product over one `QuantizedWeight` (see the module docstring for the contract).
    Subclasses set `name` (shown at start-up and in `/info`) and may set `max_rows`."""

    name: str = "quantized linear"
    #: the largest input row count this kernel computes; None: every row count (the dense weight is dropped)
    max_rows: int | None = None

    @abstractmethod
    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x [rows, cols] -> x @ W.T + bias [rows, out], in x's dtype."""

    def release_source(self) -> bool:
        """True when the kernel repacked the weight into its own layout and keeps no reference to the
        `QuantizedWeight`: the seam then sets `module.quant_weight = None` so that one copy stays in memory
        (`module.quant_format` keeps the format's name). Default False."""
        return False


class RowSplitKernel:
    """A `linear_kernel` for a quantized kernel with a finite `max_rows`: inputs of at most `max_rows` rows
    go to it, larger ones to the dense product (`dense(x, bias)`, the backend's prepared kernel, or
    `F.linear` on the dense weight when None)."""

    def __init__(self, quantized: QuantizedLinearKernel, weight: torch.Tensor, dense=None) -> None:
        self.quantized = quantized
        self.weight = weight
        self.dense = dense

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.dim() == 2 and x.shape[0] <= self.quantized.max_rows and x.dtype == self.weight.dtype:
            return self.quantized(x, bias)
        if self.dense is not None:
            return self.dense(x, bias)
        return F.linear(x, self.weight, bias)


class RowPartsKernel(QuantizedLinearKernel):
    """The product over a `RowParts` weight: one backend kernel per part, outputs side by side (a copy of
    the [rows, out] output, small against reading the weights). Takes the rows all its parts take."""

    def __init__(self, kernels: list[QuantizedLinearKernel]) -> None:
        self.kernels = kernels
        self.name = " + ".join(dict.fromkeys(k.name for k in kernels))
        limits = [k.max_rows for k in kernels if k.max_rows is not None]
        self.max_rows = min(limits) if limits else None

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        out = torch.cat([k(x, None) for k in self.kernels], dim=-1)
        return out if bias is None else out + bias

    def release_source(self) -> bool:
        return all([k.release_source() for k in self.kernels])  # each told, in order


def backend_kernel(backend: TorchBackend, weight: QuantizedWeight, dtype: str) -> QuantizedLinearKernel:
    """The backend's kernel for `weight` (one per part of a `RowParts`), after checking each format."""
    from tgi.core.quant.weights import RowParts

    if isinstance(weight, RowParts):
        return RowPartsKernel([backend_kernel(backend, p, dtype) for p in weight.parts])
    backend.check_weight_format(weight.format, dtype)
    return backend.quantized_linear(weight, dtype)


def quantized_linears(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(name, module) of every linear of `model` with a `quant_weight` attached (before the kernels are)."""
    return [
        (name, m)
        for name, m in model.named_modules()
        if getattr(m, "quant_weight", None) is not None and hasattr(type(m), "linear_kernel")
    ]


def drop_dense_weight(module: torch.nn.Module) -> None:
    """Replace `module.weight` by a meta tensor of its shape and dtype (no memory; a dense product fails);
    the device it was on stays readable through `weight_device(module)`."""
    weight = module.weight
    placeholder = torch.empty(weight.shape, dtype=weight.dtype, device="meta")
    if "weight" in module._parameters:
        del module._parameters["weight"]
    module.weight = placeholder
    module.quant_device = weight.device


def weight_device(module: torch.nn.Module) -> torch.device:
    """The device a linear computes on: its weight's, or where it was before `drop_dense_weight` (for
    code that places tensors beside a layer's weight, such as LoRA's)."""
    weight = module.weight
    return getattr(module, "quant_device", weight.device) if weight.is_meta else weight.device


def attach_quantized_kernels(model: torch.nn.Module, backend: TorchBackend, dtype: str) -> dict[str, int]:
    """Ask `backend` for a kernel for every linear with a `quant_weight` and attach it as the module's
    `linear_kernel` (see the module docstring). Returns kernel name -> number of linears. Raises
    `UnsupportedError` naming the layer when the backend refuses a format or returns a kernel that cannot
    stand alone for a weight without a dense copy."""
    counts: Counter[str] = Counter()
    for name, module in quantized_linears(model):
        weight: QuantizedWeight = module.quant_weight
        if (weight.rows, weight.cols) != tuple(module.weight.shape):
            raise ValueError(
                f"quantized weight of {name} is [{weight.rows}, {weight.cols}], the layer "
                f"{tuple(module.weight.shape)}"
            )
        kernel = backend_kernel(backend, weight, dtype)
        has_dense = module.weight.device.type != "meta"
        module.quant_format = weight.format
        if kernel.release_source():
            module.quant_weight = None  # the kernel holds its own packed copy: one copy in memory
        if kernel.max_rows is None:
            module.linear_kernel = kernel
            if has_dense:
                drop_dense_weight(module)
        elif has_dense:
            module.linear_kernel = RowSplitKernel(kernel, module.weight, module.linear_kernel)
        else:
            raise UnsupportedError(
                f"{name}: the {backend.name} backend's kernel for {weight.format} takes at most "
                f"{kernel.max_rows} rows and this layer has no dense weight for larger inputs"
            )
        counts[kernel.name] += 1
    return dict(counts)
