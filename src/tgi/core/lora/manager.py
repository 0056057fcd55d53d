"""The adapters of a loaded model: their weights stacked per linear, the linears' kernels wrapped so that
every product adds its tokens' adapter deltas, and the per-step map of tokens to adapters; `load_lora`
reads the adapters of `--lora-adapters` and attaches them, `check_lora` checks one without attaching it.

Contract: `LoRAModel(model, adapters, ops)` wraps the `linear_kernel` of each linear that some adapter
adapts (after the backend's `prepare_model`: the delta is added on top of whatever the base product is,
dense, packed or block-quantized; base weights are never merged). Before each forward the runner calls
`begin_step(sequences)` with the batch's sequences in token order (each `ScheduledSequence` carries its
adapter in `sampling.adapter_id`); a step where no sequence has an adapter runs the base products only.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from tgi.core.lora.adapter import AdapterError, LoRAAdapter, read_adapter
from tgi.core.lora.ops import LoRAOps, LoRAWeights, TorchLoRAOps
from tgi.core.quant.kernels import weight_device


class _StepState:
    """Shared by every wrapped linear: the ops and the current step's plan."""

    def __init__(self, ops: LoRAOps) -> None:
        self.ops = ops
        self.plan: object | None = None


class LoRALinearKernel:
    """A `linear_kernel` (see `tgi.core.models.layers.linear`): the module's base product (its previous
    kernel, or `F.linear`), plus the step's adapter deltas."""

    def __init__(self, module: nn.Module, weights: LoRAWeights, state: _StepState) -> None:
        # weakly: the module holds this kernel, and a module <-> kernel cycle would outlive the model once
        # the server has frozen its start-up objects (`gc.freeze`): a swapped-out model would never be freed
        self.module = weakref.proxy(module)
        self.base = module.linear_kernel
        self.weights = weights
        self.state = state

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        y = F.linear(x, self.module.weight, bias) if self.base is None else self.base(x, bias)
        plan = self.state.plan
        return y if plan is None else self.state.ops.apply(y, x, self.weights, plan)


def stack_weights(module: nn.Module, name: str, adapters: Sequence[LoRAAdapter]) -> LoRAWeights:
    """The adapters' parts for module `name`, stacked as `LoRAWeights` (ranks zero-padded)."""
    out_features, in_features = module.weight.shape
    per_adapter = [a.parts.get(name, []) for a in adapters]
    rank = max(sum(p.a.shape[0] for p in parts) for parts in per_adapter)
    dtype, device = module.weight.dtype, weight_device(module)  # quantized: no dense
    a = torch.zeros(len(adapters), rank, in_features, dtype=dtype, device=device)
    b = torch.zeros(len(adapters), out_features, rank, dtype=dtype, device=device)
    for slot, parts in enumerate(per_adapter):
        col = 0
        for part in parts:
            r, rows = part.a.shape[0], part.b.shape[0]
            a[slot, col : col + r] = part.a
            b[slot, part.row_offset : part.row_offset + rows, col : col + r] = part.b
            col += r
    return LoRAWeights(a, b, tuple(bool(parts) for parts in per_adapter))


class LoRAModel:
    """The adapters served with one model (see the module docstring). `add` and `remove` change them at run
    time, between steps: every adapted linear's stacked weights are made anew (slots renumbered, ranks
    re-padded), a linear no adapter adapts any more gets its base kernel back."""

    def __init__(self, model: nn.Module, adapters: Sequence[LoRAAdapter], ops: LoRAOps) -> None:
        self.model = model
        self.state = _StepState(ops)
        self.adapters: list[LoRAAdapter] = []
        self._kernels: dict[str, LoRALinearKernel] = {}  # module name -> its wrapper
        self._attach(list(adapters))

    def _attach(self, adapters: list[LoRAAdapter]) -> None:
        modules = dict(self.model.named_modules())
        adapted = sorted({name for a in adapters for name in a.parts})
        for name in [n for n in self._kernels if n not in adapted]:
            modules[name].linear_kernel = self._kernels.pop(name).base  # back to the base product
        for name in adapted:
            module, weights = modules[name], stack_weights(modules[name], name, adapters)
            if name in self._kernels:
                self._kernels[name].weights = weights
            else:
                self._kernels[name] = module.linear_kernel = LoRALinearKernel(module, weights, self.state)
        self.adapters = adapters
        self.names = tuple(a.name for a in adapters)
        self.slots = {name: i for i, name in enumerate(self.names)}
        self.num_linears = len(adapted)

    def add(self, adapter: LoRAAdapter) -> None:
        """Serve one more adapter (between steps); its name must be new."""
        if adapter.name in self.slots:
            raise ValueError(f"LoRA adapter '{adapter.name}' is loaded already")
        self._attach([*self.adapters, adapter])

    def remove(self, name: str) -> None:
        """Stop serving adapter `name` (between steps, with no request of it in the batch) and drop its
        weights; KeyError when it is not loaded."""
        if name not in self.slots:
            raise KeyError(name)
        self._attach([a for a in self.adapters if a.name != name])

    def begin_step(self, sequences: Sequence, device: torch.device) -> None:
        """Map the step's tokens (sequences in batch order, each `len(token_ids)` tokens) to adapters."""
        token_slots: list[int] = []
        for s in sequences:
            adapter = s.sampling.adapter_id
            token_slots += [-1 if adapter is None else self.slots[adapter]] * len(s.token_ids)
        self.state.plan = self.state.ops.plan(token_slots, device)

    def end_step(self) -> None:
        """Drop the step's plan: products outside a step (warm-up, heads) run without adapters."""
        self.state.plan = None


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
