"""Hugging Face safetensors checkpoints as numpy arrays memory-mapped from the files (no torch here): for
backends of other frameworks (JAX places numpy arrays on its devices). The shards and the tensors read
from each come from `safetensors_shards`; each tensor is mapped with `numpy.memmap` at its header's
offsets, so a caller that reads a slice (`select`) touches only those pages. bfloat16 tensors need the
`ml_dtypes` package (JAX installs it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tgi.core.loading.safetensors_shards import iter_shards
from tgi.core.loading.selection import WeightSelector

_NUMPY_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}  # fmt: skip


def _numpy_dtype(name: str, path: Path) -> np.dtype:
    if name == "BF16":
        try:
            import ml_dtypes
        except ImportError:
            raise ImportError(
                f"{path}: bfloat16 tensors as numpy arrays need the ml_dtypes package (pip install ml_dtypes)"
            ) from None
        return np.dtype(ml_dtypes.bfloat16)
    if name not in _NUMPY_DTYPES:
        raise ValueError(f"{path}: safetensors dtype {name} has no numpy equivalent here")
    return np.dtype(_NUMPY_DTYPES[name])


def iter_safetensors_arrays(
    folder: str, select: WeightSelector | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """Yield `(name, array)` for every tensor of every shard, in the file's dtype: read-only arrays mapped
    from the file (a `select`ed slice is a view of the mapping; copy an array to write to it)."""
    for shard in iter_shards(folder, select):
        for name, spec in shard.tensors:
            info = shard.header[name]
            dtype = _numpy_dtype(info["dtype"], shard.path)
            shape = tuple(info["shape"])
            begin, end = info["data_offsets"]
            if end == begin:  # numpy cannot map zero bytes
                array = np.empty(shape, dtype=dtype)
            else:
                offset = shard.data_start + begin
                array = np.memmap(shard.path, dtype=dtype, mode="r", offset=offset, shape=shape)
            yield name, array if spec is None else array[spec]
