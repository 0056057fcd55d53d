"""A GGUF file's header read straight from its memory map: metadata values and tensor views, without
`gguf.GGUFReader`'s per-value numpy objects (it makes several for each of the ~100k strings of a 49k-token
vocabulary and its merges: seconds per load).

`GGUFFile(path)` reads the header once; `metadata` maps each key to the value `GGUFReader`'s
`field.contents()` gives (numbers, str, lists), except that an array of strings is a `GGUFStrings`
sequence decoded on access; `tensors` lists `GGUFTensor`s whose `data` is the read-only numpy view of the
map that `GGUFReader` gives (typed for float and integer tensors, uint8 [..., bytes per row] for block
formats). Little-endian files only (what llama.cpp writes); a big-endian one is refused by name.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

_MAGIC = b"GGUF"
_VERSIONS = (2, 3)
_DEFAULT_ALIGNMENT = 32
_STRING, _ARRAY = 8, 9
#: GGUF value type -> struct format of its scalar (little-endian)
_SCALARS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
#: GGUF value type -> numpy dtype, for arrays of numbers read at once
_NUMPY = {
    0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
    7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64,
}  # fmt: skip
#: tensor types stored as plain numbers (the others: uint8 blocks), as `GGUFReader` types their views
_TYPED = {
    GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.F32: np.float32,
    GGMLQuantizationType.F64: np.float64,
    GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16,
    GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


class GGUFStrings(Sequence):
    """An array of strings of the header (a tokenizer's tokens or merges): its length known at once, each
    string decoded from the map when asked for."""

    def __init__(self, buf: mmap.mmap, offsets: list[int]) -> None:
        self._buf = buf
        self._offsets = offsets  # the length prefix of each string

    def __len__(self) -> int:
        return len(self._offsets)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        start = self._offsets[index]
        (size,) = struct.unpack_from("<Q", self._buf, start)
        return self._buf[start + 8 : start + 8 + size].decode("utf-8")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of the file, as `gguf.GGUFReader` describes it."""

    name: str
    tensor_type: GGMLQuantizationType
    shape: tuple[int, ...]  # GGUF order: the innermost (row) dimension first
    data: np.ndarray  # a read-only view of the map, in numpy order (see the module docstring)


class GGUFFile:
    """The header of one GGUF file (see the module docstring); `ValueError` for a file that is no GGUF or
    one this reader does not take, naming what it found."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self._buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.path = path
        buf = self._buf
        if buf[:4] != _MAGIC:
            raise ValueError(f"{path}: not a GGUF file (magic {bytes(buf[:4])!r})")
        (version,) = struct.unpack_from("<I", buf, 4)
        if version not in _VERSIONS:
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            what = "a big-endian GGUF file" if swapped in _VERSIONS else f"GGUF version {version}"
            raise ValueError(f"{path}: {what} is not supported (little-endian GGUF versions 2 and 3)")
        tensor_count, kv_count = struct.unpack_from("<QQ", buf, 8)
        self._pos = 24
        self.metadata: dict[str, Any] = {}
        for _ in range(kv_count):
            key = self._string()
            if key in self.metadata:
                raise ValueError(f"{path}: metadata key {key!r} appears twice")
            (value_type,) = self._unpack("<I")
            self.metadata[key] = self._value(value_type)
        infos = [self._tensor_info() for _ in range(tensor_count)]
        alignment = self.metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"{path}: general.alignment {alignment!r} is not a power of two")
        data_start = -(-self._pos // alignment) * alignment
        self.tensors = [self._tensor(data_start, *info) for info in infos]
        if len({t.name for t in self.tensors}) != len(self.tensors):
            raise ValueError(f"{path}: a tensor name appears twice")

    # -- header parsing: `self._pos` walks the header
    def _unpack(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self._buf, self._pos)
        self._pos += struct.calcsize(fmt)
        return values

    def _string(self) -> str:
        (size,) = self._unpack("<Q")
        start = self._pos
        self._pos += size
        return self._buf[start : self._pos].decode("utf-8")

    def _value(self, value_type: int) -> Any:
        if value_type == _STRING:
            return self._string()
        fmt = _SCALARS.get(value_type)
        if fmt is not None:
            return self._unpack(fmt)[0]
        if value_type != _ARRAY:
            raise ValueError(f"{self.path}: unknown GGUF value type {value_type} at byte {self._pos}")
        item_type, count = self._unpack("<IQ")
        if item_type == _STRING:
            return GGUFStrings(self._buf, self._skip_strings(count))
        dtype = _NUMPY.get(item_type)
        if dtype is not None:
            values = np.frombuffer(self._buf, dtype=dtype, count=count, offset=self._pos)
            self._pos += values.nbytes
            return values.tolist()
        return [v for _ in range(count) for v in _flat(self._value(item_type))]  # arrays of arrays: flat

    def _skip_strings(self, count: int) -> list[int]:
        """The offsets of `count` length-prefixed strings from `self._pos`, which moves past them."""
        buf, pos, offsets = self._buf, self._pos, [0] * count
        unpack = struct.Struct("<Q").unpack_from
        for i in range(count):
            offsets[i] = pos
            pos += 8 + unpack(buf, pos)[0]
        self._pos = pos
        return offsets

    def _tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self._string()
        (n_dims,) = self._unpack("<I")
        dims = self._unpack(f"<{n_dims}Q")
        raw_type, offset = self._unpack("<IQ")
        return name, dims, raw_type, offset

    def _tensor(self, data_start: int, name: str, dims: tuple[int, ...], raw_type: int, offset: int):
        try:
            qtype = GGMLQuantizationType(raw_type)
        except ValueError:
            raise ValueError(f"{self.path}: tensor {name!r} has unknown GGML type {raw_type}") from None
        shape = tuple(reversed(dims))
        elements = int(np.prod(dims, dtype=np.int64))
        block, type_bytes = GGML_QUANT_SIZES[qtype]
        dtype = _TYPED.get(qtype)
        if dtype is None:
            if shape[-1] % block:
                raise ValueError(
                    f"{self.path}: tensor {name!r} rows of {shape[-1]} are not {qtype.name} blocks"
                )
            shape = (*shape[:-1], shape[-1] // block * type_bytes)
            dtype, count = np.uint8, elements // block * type_bytes
        else:
            count = elements
        start = data_start + offset
        if start + count * np.dtype(dtype).itemsize > len(self._buf):
            raise ValueError(f"{self.path}: tensor {name!r} runs past the end of the file (truncated?)")
        data = np.frombuffer(self._buf, dtype=dtype, count=count, offset=start).reshape(shape)
        return GGUFTensor(name, qtype, dims, data)


def _flat(value: Any) -> list:
    return list(value) if isinstance(value, (list, GGUFStrings)) else [value]
