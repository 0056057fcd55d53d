"""Hugging Face safetensors checkpoints as numpy arrays memory-mapped from the files (no torch here): for
backends of other frameworks (JAX places numpy arrays on its devices), and the shard list both loaders use.

A safetensors file is an 8-byte little-endian header length, a JSON header (per tensor: dtype, shape,
data offsets) and the tensors' bytes; each tensor is mapped with `numpy.memmap`, so a caller that reads a
slice (`select`) touches only those pages. bfloat16 tensors need the `ml_dtypes` package (JAX installs it).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tgi.core.loading.selection import SKIP, WeightSelector, selection

INDEX_FILE = "model.safetensors.index.json"

_NUMPY_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}  # fmt: skip


def safetensors_files(folder: str) -> list[Path]:
    """The checkpoint's shard files, from the index when there is one, else every *.safetensors file.

    Raises `ValueError` naming the entry when the index names a shard outside `folder` (an absolute path,
    or one with a `..` part), before any file is opened."""
    root = Path(folder)
    index = root / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        for name in sorted(set(weight_map.values())):
            if Path(name).is_absolute() or ".." in Path(name).parts:
                raise ValueError(
                    f"{folder}: {INDEX_FILE} names the shard {name!r}, a path outside the model folder"
                )
        files = sorted({root / f for f in weight_map.values()})
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(
                f"{folder}: shards listed in {INDEX_FILE} are missing: {', '.join(missing)}"
            )
        return files
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors file")
    return files


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


def read_header(path: Path) -> tuple[dict[str, dict], int]:
    """The tensors of one safetensors file (name -> {"dtype", "shape", "data_offsets"}) and the offset of
    its data section."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    header.pop("__metadata__", None)
    return header, 8 + length


def iter_safetensors_arrays(
    folder: str, select: WeightSelector | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """Yield `(name, array)` for every tensor of every shard, in the file's dtype: read-only arrays mapped
    from the file (a `select`ed slice is a view of the mapping; copy an array to write to it)."""
    seen: set[str] = set()
    for path in safetensors_files(folder):
        header, data_start = read_header(path)
        for name in sorted(header):
            if name in seen:
                raise ValueError(f"{folder}: tensor {name!r} appears in more than one shard")
            seen.add(name)
            spec = selection(select, name)
            if spec is SKIP:
                continue
            info = header[name]
            dtype = _numpy_dtype(info["dtype"], path)
            shape = tuple(info["shape"])
            begin, end = info["data_offsets"]
            if end == begin:  # numpy cannot map zero bytes
                array = np.empty(shape, dtype=dtype)
            else:
                array = np.memmap(path, dtype=dtype, mode="r", offset=data_start + begin, shape=shape)
            yield name, array if spec is None else array[spec]
