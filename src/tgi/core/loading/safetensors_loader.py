"""Hugging Face checkpoints: config.json + *.safetensors (single file or sharded with an index).

Tensors are memory-mapped with `safetensors.safe_open(framework="pt")` and yielded in the file's dtype
(bf16 stays bf16, fp16 stays fp16): the caller casts them where it places them. The shards and the tensors
read from each: `safetensors_shards.py`; the same tensors as numpy arrays: `safetensors_arrays.py`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import torch
from safetensors import safe_open
from transformers import AutoConfig, PretrainedConfig

from tgi.core.config import ConfigError
from tgi.core.loading.safetensors_shards import iter_shards
from tgi.core.loading.selection import WeightSelector


def safetensors_config(folder: str, trust_remote_code: bool = False) -> PretrainedConfig:
    """`AutoConfig.from_pretrained(folder)`, with `architectures` and `dtype` filled in when missing.

    A config whose `model_type` transformers does not know, with an `auto_map` naming a config class of the
    checkpoint's own (its *.py), is refused with `ConfigError` naming `--trust-remote-code` unless
    `trust_remote_code`; with it, that class is loaded, and the checkpoint's causal-LM class
    (`auto_map["AutoModelForCausalLM"]`) is registered for it, so that the transformers fallback runs the
    checkpoint's model when no native model serves its architecture. A config transformers knows is always
    transformers' own class (its `auto_map` ignored, as transformers does without `trust_remote_code`), and a
    native architecture always runs tgi's model code."""
    custom = _custom_config_class(folder)
    if custom is not None and not trust_remote_code:
        raise ConfigError(
            f"{folder}: its config.json needs the checkpoint's own code (auto_map: {custom}, a model_type "
            "transformers does not know); pass --trust-remote-code (TRUST_REMOTE_CODE=true) to run it"
        )
    # never None: transformers would ask on a terminal
    config = AutoConfig.from_pretrained(folder, trust_remote_code=custom is not None)
    if custom is not None:
        _register_custom_causal_lm(config, folder)
    if not getattr(config, "architectures", None):
        # transformers names the causal-LM class after the config class (LlamaConfig -> LlamaForCausalLM).
        name = type(config).__name__.removesuffix("Config")
        config.architectures = [f"{name}ForCausalLM"]
    if getattr(config, "dtype", None) is None:
        config.dtype = _first_tensor_dtype(folder)
    return config


def _custom_config_class(folder: str) -> str | None:
    """The `auto_map` config class of a config.json whose `model_type` transformers does not know (the
    checkpoint's own code would run to read it), else None."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        raw = json.load(f)
    custom = (raw.get("auto_map") or {}).get("AutoConfig")
    if custom is None or raw.get("model_type") in CONFIG_MAPPING:
        return None
    return str(custom)


def _register_custom_causal_lm(config: PretrainedConfig, folder: str) -> None:
    """With --trust-remote-code: the checkpoint's causal-LM class made transformers' causal LM for its own
    config class (what `AutoModelForCausalLM.from_pretrained(trust_remote_code=True)` does), unless a
    native model serves the architecture (then no checkpoint model code is imported)."""
    from transformers import AutoModelForCausalLM
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    from tgi.core.models.registry import UnsupportedModelError, architecture_of

    ref = (getattr(config, "auto_map", None) or {}).get("AutoModelForCausalLM")
    if ref is None:
        return  # the fallback says that transformers has no causal LM for the config
    try:
        architecture_of(config)
        return  # native
    except UnsupportedModelError:
        pass
    cls = get_class_from_dynamic_module(ref, folder)
    AutoModelForCausalLM.register(type(config), cls, exist_ok=True)


_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def _first_tensor_dtype(folder: str) -> torch.dtype:
    """The dtype of the first floating-point tensor (for configs that do not say)."""
    for shard in iter_shards(folder):
        for name, _ in shard.tensors:
            dtype = _DTYPES.get(shard.header[name]["dtype"])
            if dtype is not None:
                return dtype
    return torch.float32


def iter_safetensors_weights(
    folder: str, select: WeightSelector | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield `(name, tensor)` for every tensor of every shard, in the file's dtype, on the CPU.

    With `select`, skipped tensors are never read and sliced ones are read only in part (`get_slice`).
    """
    for shard in iter_shards(folder, select):
        with safe_open(str(shard.path), framework="pt", device="cpu") as f:
            for name, spec in shard.tensors:
                yield name, f.get_tensor(name) if spec is None else f.get_slice(name)[spec].contiguous()
