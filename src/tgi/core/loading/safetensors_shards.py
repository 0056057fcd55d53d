"""The shards of a Hugging Face safetensors checkpoint and the tensors a load reads from each: the one walk
over shards that both tensor readers take (torch tensors: `safetensors_loader`, numpy arrays:
`safetensors_arrays`). No torch and no numpy here.

A safetensors file is an 8-byte little-endian header length, a JSON header (per tensor: dtype, shape,
data offsets) and the tensors' bytes.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tgi.core.loading.selection import SKIP, WeightSelector, selection

INDEX_FILE = "model.safetensors.index.json"


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


def read_header(path: Path) -> tuple[dict[str, dict], int]:
    """The tensors of one safetensors file (name -> {"dtype", "shape", "data_offsets"}) and the offset of
    its data section."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    header.pop("__metadata__", None)
    return header, 8 + length


@dataclass(frozen=True)
class Shard:
    """One shard file and the tensors a load reads from it."""

    path: Path
    #: the file's header: tensor name -> {"dtype", "shape", "data_offsets"} (every tensor, skipped ones too)
    header: dict[str, dict]
    #: the byte offset of the file's data section (`data_offsets` count from it)
    data_start: int
    #: (name, the part to read: an index tuple, None for the whole tensor) of each tensor kept, by name
    tensors: tuple[tuple[str, tuple | None], ...]


def iter_shards(folder: str, select: WeightSelector | None = None) -> Iterator[Shard]:
    """Every shard of the checkpoint in `folder` (`safetensors_files`), with the tensors `select` keeps.

    Raises `ValueError` naming the tensor when one appears in more than one shard, before any tensor of
    the shard where it appears again is handed out."""
    seen: set[str] = set()
    for path in safetensors_files(folder):
        header, data_start = read_header(path)
        kept = []
        for name in sorted(header):
            if name in seen:
                raise ValueError(f"{folder}: tensor {name!r} appears in more than one shard")
            seen.add(name)
            spec = selection(select, name)
            if spec is not SKIP:
                kept.append((name, spec))
        yield Shard(path, header, data_start, tuple(kept))
