"""The quantization steps of one model load, in the order the runner takes them (`TorchModelRunner.load`):
which quantization (`config`), refusals before any weight is read, a quantized checkpoint's packed tensors
diverted from the dense loader (`packed_checkpoint`) or the dense linears quantized (`quantize_dense`),
then the backend's kernels. The model loader itself (files, config, tensor streams) is `tgi.core.loading`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import torch

from tgi.core.interfaces.quantization import QuantizationInfo
from tgi.core.interfaces.types import UnsupportedError
from tgi.core.quant.config import resolve_quantization

if TYPE_CHECKING:
    from tgi.core.loading.source import ModelSource
    from tgi.core.torch.backend import TorchBackend


class QuantizedLoading:
    """Resolves the model's quantization (checkpoint `quantization_config` and `--quantize`, see
    `tgi.core.quant.config`), refuses what the backend cannot compute before any weight is read, diverts a
    quantized checkpoint's packed tensors away from the dense loader, quantizes at load where asked, and
    finally asks the backend for the kernels (`attach_quantized_kernels`)."""

    def __init__(
        self, backend: TorchBackend, hf_config, quantize: str | None, source: ModelSource, dtype: str
    ) -> None:
        self.backend = backend
        self.dtype = dtype
        self.spec = resolve_quantization(hf_config, quantize, source.format)
        self._store: dict[str, dict[str, torch.Tensor]] = {}

    def check(self, model: torch.nn.Module, tp_size: int) -> None:
        """Refuse, with the reason, a quantization this load cannot serve."""
        if self.spec is None:
            return
        if tp_size > 1:
            raise UnsupportedError(
                f"{self.spec.describe()}: quantized weights are not sharded over --num-shard ranks (their "
                "packed tensors would be split along packed dims and groups); serve with --num-shard 1"
            )
        if not hasattr(model, "attach_quantized_weights"):
            raise UnsupportedError(
                f"{self.spec.describe()}: the {type(model).__name__} model path has no quantized linears"
            )
        self.backend.check_weight_format(self.spec.weight_format, self.dtype)

    def split_checkpoint(
        self, model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor]] | Iterable[tuple[str, torch.Tensor]]:
        """The dense tensors for `load_weights`; a quantized checkpoint's packed ones are kept aside."""
        if self.spec is None or self.spec.source != "checkpoint":
            return weights
        from tgi.core.quant.packed_checkpoint import split_quantized

        return split_quantized(model, weights, self.spec, self._store)

    def attach_weights(self, model: torch.nn.Module) -> None:
        """After `load_weights`: attach the checkpoint's quantized weights, or quantize the dense linears."""
        if self.spec is None:
            return
        device = next(model.parameters()).device
        if self.spec.source == "checkpoint":
            from tgi.core.quant.packed_checkpoint import build_weights

            count = model.attach_quantized_weights(
                build_weights(self._store, self.spec, device), required=True
            )
            self._store.clear()
            if not count:
                raise ValueError(f"{self.spec.describe()}: the checkpoint holds no quantized linear weights")
            return
        from tgi.core.quant.quantize_dense import quantize_linears

        quantize_linears(model, self.spec.weight_format, self.spec.exclude)

    def attach_kernels(self, model: torch.nn.Module) -> QuantizationInfo | None:
        """Ask the backend for every quantized linear's kernel; what the model runs with, for `/info`."""
        from tgi.core.quant.kernels import attach_quantized_kernels, quantized_linears

        # a fused linear whose parts differ (`RowParts`) names each part's format, joined by "+"
        formats = sorted({f for _, m in quantized_linears(model) for f in m.quant_weight.format.split("+")})
        kernels = attach_quantized_kernels(model, self.backend, self.dtype)
        if not kernels:
            return None
        described = ", ".join(f"{name} x{n}" for name, n in kernels.items())
        count = sum(kernels.values())
        if self.spec is None:  # GGUF blocks
            return QuantizationInfo("gguf", ",".join(formats), "checkpoint", count, described, "gguf")
        return QuantizationInfo(
            self.spec.method,
            self.spec.weight_format,
            self.spec.source,
            count,
            described,
            self.spec.describe(),
        )
