"""GGUF weights dequantized natively at load: one pass per tensor from the file's bytes to the model's dtype
(`tgi.backends.cpu.native.block_dequantize`), in place of `gguf`'s numpy dequantization, which loops over
groups of 16 rows in Python and makes float32 temporaries (a 1B-class Q4_K_M file: ~15 s of its load here).
The values are `gguf`'s bit for bit (tests/unit/backends/cpu/test_cpu_gguf_dequant.py)."""

from __future__ import annotations

import warnings

import numpy as np
import torch

#: stored float types, read as they are and converted to the model's dtype by torch (exact, or one rounding
#: to nearest even: what `gguf`'s float32 values cast to the model's dtype give)
_FLOAT_TYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def _as_tensor(raw: np.ndarray) -> torch.Tensor:
    """uint8 [rows, bytes] -> a tensor over the same bytes (copied only where not contiguous); read only by
    the caller, so a read-only memory map is not copied."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns on read-only arrays: nothing writes
        return torch.from_numpy(np.ascontiguousarray(raw))


class NativeGGUFDequantizer:
    """A `tgi.core.loading.gguf_loader.GGUFDequantizer` for a model in `dtype` (bfloat16 or float32): the
    block types of `native.BLOCK_TYPES` natively, the float types by torch; others declined (None)."""

    def __init__(self, dtype: torch.dtype) -> None:
        from tgi.backends.cpu import native

        if dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"GGUF weights are dequantized natively to bfloat16 or float32, not {dtype}")
        self.dtype = dtype
        self._native = native

    def __call__(self, raw: np.ndarray, qtype: str, rows: int, cols: int) -> torch.Tensor | None:
        if qtype in self._native.BLOCK_TYPES:
            return self._native.block_dequantize(_as_tensor(raw), qtype, rows, cols, self.dtype)
        stored = _FLOAT_TYPES.get(qtype)
        if stored is None:
            return None
        return _as_tensor(raw).view(stored).reshape(rows, cols).to(self.dtype, copy=True)
