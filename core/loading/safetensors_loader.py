"""Hugging Face checkpoints: config.json + *.safetensors (single file or sharded with an index).

Tensors are memory-mapped with `safetensors.safe_open(framework="pt")` and yielded in the file's dtype
(bf16 stays bf16, fp16 stays fp16): the caller casts them where it places them. The same tensors as numpy
arrays: `safetensors_arrays.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from safetensors import safe_open
from transformers import AutoConfig, PretrainedConfig

from tgi.core.loading.safetensors_arrays import safetensors_files
from tgi.core.loading.selection import SKIP, WeightSelector, selection


def safetensors_config(folder: str) -> PretrainedConfig:
    """`AutoConfig.from_pretrained(folder)`, with `architectures` and `dtype` filled in when missing."""
    config = AutoConfig.from_pretrained(folder)
    if not getattr(config, "architectures", None):
        # transformers names the causal-LM class after the config class (LlamaConfig -> LlamaForCausalLM).
        name = type(config).__name__.removesuffix("Config")
        config.architectures = [f"{name}ForCausalLM"]
    if getattr(config, "dtype", None) is None:
        config.dtype = _first_tensor_dtype(folder)
    return config


_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def _first_tensor_dtype(folder: str) -> torch.dtype:
    """The dtype of the first floating-point tensor (for configs that do not say)."""
    for path in safetensors_files(folder):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                dtype = _DTYPES.get(f.get_slice(name).get_dtype())
                if dtype is not None:
                    return dtype
    return torch.float32


def iter_safetensors_weights(
    folder: str, select: WeightSelector | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield `(name, tensor)` for every tensor of every shard, in the file's dtype, on the CPU.

    With `select`, skipped tensors are never read and sliced ones are read only in part (`get_slice`).
    """
    seen: set[str] = set()
    for path in safetensors_files(folder):
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                if name in seen:
                    raise ValueError(f"{folder}: tensor {name!r} appears in more than one shard")
                seen.add(name)
                spec = selection(select, name)
                if spec is SKIP:
                    continue
                if spec is None:
                    yield name, f.get_tensor(name)
                else:
                    yield name, f.get_slice(name)[spec].contiguous()
