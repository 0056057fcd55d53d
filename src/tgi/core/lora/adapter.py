"""Reading a PEFT LoRA adapter (`adapter_config.json` + `adapter_model.safetensors`) and mapping it onto
the linear layers of one of core's models, checked against their shapes.

Contract: `read_adapter(name, path, model)` returns a `LoRAAdapter` whose `parts` say, for each linear module
of the model it adapts (by the model's module name), which output rows each low-rank pair `(A, B)` adds to:
`y[:, rows] += (x @ A.T) @ B.T`, with the adapter's scaling (`lora_alpha / r`, or `lora_alpha / sqrt(r)`
with `use_rslora`) already applied to B. The base weights are never touched. An adapter that does not fit
(unknown module, wrong shape, a PEFT feature that changes the forward and that we do not implement) raises
`AdapterError` naming the adapter, the tensor and the reason.

PEFT names a tensor `base_model.model.<module>.lora_A.weight` ([r, in]) and `...lora_B.weight` ([out, r]);
`<module>` is the Hugging Face module name (`model.layers.0.self_attn.q_proj`), which the model maps onto
its fused linears (q/k/v -> `qkv_proj`, gate/up -> `gate_up_proj`) as it does for checkpoint weights.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from tgi.core.config import ConfigError
from tgi.core.quant.kernels import weight_device

#: PEFT settings that change the forward, refused by name unless off (absent, null, false, empty, "none")
_REFUSED_SETTINGS = {
    "use_dora": "DoRA (weight-decomposed LoRA) is not supported",
    "bias": "trained biases (`bias` other than 'none') are not supported",
    "modules_to_save": "`modules_to_save` (fully trained copies of modules) is not supported",
    "rank_pattern": "per-module ranks (`rank_pattern`) are not supported",
    "alpha_pattern": "per-module alphas (`alpha_pattern`) are not supported",
    "fan_in_fan_out": "`fan_in_fan_out` (Conv1D-style weights) is not supported",
    "layer_replication": "`layer_replication` is not supported",
}
_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[\w-]+)?\.weight$")
_LAYER_MODULE = re.compile(r"^model\.layers\.\d+\.")


#: `AdapterError.reason` of an adapter folder that is missing or unreadable
NO_ADAPTER = "no readable PEFT adapter (adapter_config.json and adapter_model.safetensors) at lora_path"


class AdapterError(ConfigError):
    """An adapter that cannot be served on this model (a start-up error); the message says which and why
    (for the log: it may name files); `reason` says why in words that name no path nor file content (what
    an HTTP client may be told)."""

    def __init__(self, message: str, reason: str = "it does not fit this model") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class LoRAPart:
    """One low-rank pair of an adapted linear: adds `(x @ a.T) @ b.T` to output rows
    `[row_offset, row_offset + b.shape[0])` of the module (this rank's rows)."""

    row_offset: int
    a: torch.Tensor  # [r, in_features]
    b: torch.Tensor  # [rows, r], scaling applied


@dataclass
class LoRAAdapter:
    """A loaded adapter: its id and, per adapted module name, its parts."""

    name: str
    rank: int
    scaling: float
    parts: dict[str, list[LoRAPart]] = field(default_factory=dict)


def _read_config(name: str, folder: Path) -> dict:
    path = folder / "adapter_config.json"
    if not path.is_file():
        raise AdapterError(
            f"LoRA adapter '{name}': {path} not found (a PEFT adapter folder has one)", NO_ADAPTER
        )
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AdapterError(f"LoRA adapter '{name}': {path}: {exc}", NO_ADAPTER) from None
    if not isinstance(config, dict):
        raise AdapterError(f"LoRA adapter '{name}': {path} is not a JSON object", NO_ADAPTER)
    if str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise AdapterError(
            f"LoRA adapter '{name}': peft_type {config.get('peft_type')!r} is not LORA",
            "its peft_type is not LORA",
        )
    for key, why in _REFUSED_SETTINGS.items():
        value = config.get(key)
        if value not in (None, False, {}, [], "none"):
            raise AdapterError(f"LoRA adapter '{name}': {why} (adapter_config.json has {key}={value!r})", why)
    if not isinstance(config.get("r"), int) or config["r"] < 1:
        raise AdapterError(
            f"LoRA adapter '{name}': `r` must be a positive integer, got {config.get('r')!r}",
            "its `r` is not a positive integer",
        )
    return config


def _read_tensors(name: str, folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = folder / "adapter_model.safetensors"
    if not path.is_file():
        raise AdapterError(
            f"LoRA adapter '{name}': {path} not found (only safetensors adapters are read)", NO_ADAPTER
        )
    try:
        return load_file(str(path))
    except Exception as exc:  # unreadable, or not safetensors (safetensors' own error type)
        raise AdapterError(f"LoRA adapter '{name}': {path}: {exc}", NO_ADAPTER) from None


class _Place(NamedTuple):
    """Where one part of a linear sits against the whole layer's lora_B rows and lora_A columns (tensor
    parallelism: a column-parallel layer holds some output rows, a row-parallel one some input columns)."""

    offset: int  # first output row of the part in this rank's module
    rows: int  # its output rows here
    first_row: int  # where they start in lora_B
    full_rows: int  # lora_B's rows (the whole part)
    first_col: int  # this rank's first input column in lora_A
    cols: int  # its input columns here
    full_cols: int  # lora_A's columns (the whole layer's input)


def _place(module: nn.Module, shard: object) -> _Place | None:
    """Part `shard` of a linear (None: the whole linear), or None when the module has no such part."""
    out_features, in_features = module.weight.shape
    parts = getattr(module, "_parts", None)  # ColumnParallelLinear: shard -> (local, size, start, full)
    if parts is not None:
        if shard not in parts:
            return None
        local, size, start, full = parts[shard]
        return _Place(local, size, start, full, 0, in_features, in_features)
    if hasattr(module, "collective") and hasattr(module, "_start"):  # RowParallelLinear
        tp = module.collective.world_size
        return _Place(0, out_features, 0, out_features, module._start, in_features, in_features * tp)
    if shard is None:
        return _Place(0, out_features, 0, out_features, 0, in_features, in_features)
    offsets = getattr(module, "_offsets", None)  # MergedLinear: shard -> (offset, size)
    if offsets is None or shard not in offsets:
        return None
    offset, size = offsets[shard]
    return _Place(offset, size, 0, size, 0, in_features, in_features)


def read_adapter(name: str, path: str | Path, model: nn.Module, max_rank: int | None = None) -> LoRAAdapter:
    """The adapter at `path` mapped onto `model` (a core `CausalLM`; under tensor parallelism, this rank's
    share: lora_B's rows of a column-parallel layer, lora_A's columns of a row-parallel one, whose partial
    delta the layer's all-reduce sums with its product); see the module docstring. An adapter whose rank
    `r` exceeds `max_rank` (None: any) is refused naming `--max-lora-rank`, before its weights are read."""
    folder = Path(path)
    if not folder.is_dir():
        raise AdapterError(f"LoRA adapter '{name}': {folder} is not a folder", NO_ADAPTER)
    config = _read_config(name, folder)
    r, alpha = config["r"], config.get("lora_alpha", config["r"])
    if max_rank is not None and r > max_rank:
        why = f"its rank {r} is larger than --max-lora-rank {max_rank}"
        raise AdapterError(f"LoRA adapter '{name}': {why}", why)
    scaling = alpha / math.sqrt(r) if config.get("use_rslora", False) else alpha / r
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    others = []  # checked after the LoRA pairs, whose refusal says more (PEFT saves a tied head's table)
    for key, tensor in _read_tensors(name, folder).items():
        match = _KEY.match(key)
        if match is None:
            others.append(key)
        else:
            pairs.setdefault(match["module"], {})[match["ab"]] = tensor
    if not pairs:
        raise AdapterError(f"LoRA adapter '{name}': adapter_model.safetensors holds no LoRA weights")
    modules = dict(model.named_modules())
    adapter = LoRAAdapter(name, r, scaling)
    for hf_module, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise AdapterError(f"LoRA adapter '{name}': module {hf_module} lacks its lora_A or lora_B")
        if not _LAYER_MODULE.match(hf_module):
            raise AdapterError(
                f"LoRA adapter '{name}': module {hf_module} is not an attention or MLP projection of a "
                "decoder layer (only those can be adapted)"
            )
        target, shard = model.checkpoint_target(f"{hf_module}.weight")
        module_name = target.rpartition(".")[0]
        module = modules.get(module_name)
        if module is None or not hasattr(module, "linear_kernel") or target.rpartition(".")[2] != "weight":
            raise AdapterError(
                f"LoRA adapter '{name}': module {hf_module} is not a linear layer of this "
                f"{model.architecture} model"
            )
        a, b = ab["A"], ab["B"]
        place = _place(module, shard)
        if place is None:
            raise AdapterError(f"LoRA adapter '{name}': cannot place part {shard!r} of module {module_name}")
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != b.shape[1]:
            raise AdapterError(
                f"LoRA adapter '{name}': {hf_module} has lora_A {tuple(a.shape)} and lora_B "
                f"{tuple(b.shape)}, not [r, in] and [out, r]"
            )
        if a.shape[1] != place.full_cols or b.shape[0] != place.full_rows:
            raise AdapterError(
                f"LoRA adapter '{name}': {hf_module} maps {a.shape[1]} -> {b.shape[0]} features, the model's "
                f"layer {place.full_cols} -> {place.full_rows}: the adapter was trained for another model",
                "it was trained for another model",
            )
        a, b = (
            a.narrow(1, place.first_col, place.cols),
            b.narrow(0, place.first_row, place.rows),
        )  # this rank's
        dtype, device = module.weight.dtype, weight_device(module)  # quantized: no dense
        part = LoRAPart(
            place.offset,
            a.to(device=device, dtype=dtype),
            (b.float() * scaling).to(device=device, dtype=dtype),
        )
        adapter.parts.setdefault(module_name, []).append(part)
    if others:
        raise AdapterError(f"LoRA adapter '{name}': tensor '{others[0]}' is not a LoRA A/B weight")
    return adapter
