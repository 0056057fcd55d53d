"""Multi-LoRA: PEFT adapters served beside one base model, chosen per request, mixed in one batch.

- `adapter`: reading a PEFT adapter folder and checking it against the model (`read_adapter`);
- `manager`: `load_lora(model, adapters, ops)` reads each `(id, folder)` of `--lora-adapters` and wraps the
  adapted linears (`LoRAModel`), `check_lora` checks one without attaching it;
- `ops`: the batched low-rank products (`LoRAOps`; `TorchLoRAOps`, core's torch reference, unless the backend
  brings a kernel);
- `served_adapters`: which adapters an engine serves, changed at run time (`ServedAdapters`), with no torch.

Importing the package imports no framework (the engine imports `served_adapters`); the names below load
their module on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tgi.core.lora.adapter import AdapterError, LoRAAdapter, read_adapter
    from tgi.core.lora.manager import LoRAModel, check_lora, load_lora
    from tgi.core.lora.ops import LoRAOps, LoRAWeights, TorchLoRAOps

_MODULE_OF = {
    "AdapterError": "adapter",
    "LoRAAdapter": "adapter",
    "read_adapter": "adapter",
    "LoRAModel": "manager",
    "check_lora": "manager",
    "load_lora": "manager",
    "LoRAOps": "ops",
    "LoRAWeights": "ops",
    "TorchLoRAOps": "ops",
}

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


def __getattr__(name: str):
    # lazy: the torch-free engine imports tgi.core.lora.served_adapters, which runs this package first
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
