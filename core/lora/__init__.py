"""Multi-LoRA: PEFT adapters served beside one base model, chosen per request, mixed in one batch.

`load_lora(model, adapters, ops)` reads each `(id, folder)` of `--lora-adapters` (`adapter.read_adapter`),
checks it against the model, and wraps the adapted linears (`manager.LoRAModel`); the batched products go
through `ops` (`ops.LoRAOps`, core's torch reference unless the backend brings a kernel).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from tgi.core.lora.adapter import AdapterError, LoRAAdapter, read_adapter
from tgi.core.lora.manager import LoRAModel
from tgi.core.lora.ops import LoRAOps, LoRAWeights, TorchLoRAOps

__all__ = [
    "AdapterError",
    "LoRAAdapter",
    "LoRAModel",
    "LoRAOps",
    "LoRAWeights",
    "TorchLoRAOps",
    "check_lora",
    "load_lora",
    "read_adapter",
]


def _check_model(model: nn.Module) -> None:
    if not hasattr(model, "checkpoint_target"):
        arch = getattr(model, "implementation_note", None) or type(model).__name__
        raise AdapterError(f"LoRA adapters need one of core's native models; this one runs on {arch}")


def check_lora(model: nn.Module, name: str, path: str, max_rank: int | None = None) -> None:
    """Read adapter `name` at `path` and check that it fits `model` (and `max_rank`), attaching nothing
    (`AdapterError`)."""
    _check_model(model)
    read_adapter(name, path, model, max_rank)


def load_lora(
    model: nn.Module,
    adapters: Sequence[tuple[str, str]],
    ops: LoRAOps | None = None,
    max_rank: int | None = None,
) -> LoRAModel:
    """Read every `(id, path)` adapter for `model` and attach them; `AdapterError` names the first that does
    not fit (or whose rank exceeds `max_rank`). The model must be one of core's native models (its linears
    take a `linear_kernel`)."""
    _check_model(model)
    loaded = [read_adapter(name, path, model, max_rank) for name, path in adapters]
    return LoRAModel(model, loaded, ops or TorchLoRAOps())
