"""Mapping between the dtype names that cross the core <-> backend boundary and torch dtypes."""

from __future__ import annotations

import torch

_TO_TORCH = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def to_torch_dtype(name: str | torch.dtype) -> torch.dtype:
    """`"bfloat16"` -> `torch.bfloat16` (a torch dtype passes through)."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return _TO_TORCH[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(_TO_TORCH)})") from None
