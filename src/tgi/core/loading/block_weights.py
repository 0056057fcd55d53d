"""Block-quantized weights as the checkpoint stores them (llama.cpp's GGUF block formats), for backends
whose kernels compute with them directly instead of with the dequantized copy.

A `BlockWeight` is one format of the quantized-linear seam (`tgi.core.quant`, format "gguf-<qtype>"): it is
attached to a linear module (`module.quant_weight`) beside its dense weight (the GGUF loader dequantizes
every tensor too) when the backend asks for its type (`TorchBackend.block_weight_types`), and the backend's
kernel for it (`TorchBackend.quantized_linear`) computes with the blocks. Both hold the same weights: the
blocks dequantize to the dense float32 values exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from tgi.core.quant.weights import QuantizedWeight

#: bytes per block: of 32 weights, fp16 scale (+ fp16 min for Q4_1 / Q5_1, + 4 bytes of fifth bits for
#: Q5_0 / Q5_1) and the packed values; the K-quants' super-blocks of 256 weights (fp16 d (and dmin),
#: sub-block scales (and mins), the packed values)
BLOCK_BYTES = {
    "Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210,
}  # fmt: skip
BLOCK_SIZE = 32
#: weights per block where it is not BLOCK_SIZE
SUPER_BLOCK_SIZES = {"Q4_K": 256, "Q5_K": 256, "Q6_K": 256}


def block_size(qtype: str) -> int:
    """Weights per block of `qtype` (32, or 256 for the K-quants)."""
    return SUPER_BLOCK_SIZES.get(qtype, BLOCK_SIZE)


@dataclass(frozen=True)
class BlockWeight(QuantizedWeight):
    """A [rows, cols] weight in a GGUF block format, row-major: `data` is uint8 [rows, cols / 32 * bytes]
    (read from a GGUF file: possibly a read-only view of its memory map, never written to)."""

    qtype: str  # a key of BLOCK_BYTES
    data: torch.Tensor
    rows: int
    cols: int

    def __post_init__(self) -> None:
        if self.qtype not in BLOCK_BYTES:
            raise ValueError(f"unknown block format {self.qtype!r} (known: {sorted(BLOCK_BYTES)})")
        if self.cols % block_size(self.qtype) or tuple(self.data.shape) != (self.rows, self.row_bytes):
            raise ValueError(
                f"{self.qtype} data of shape {tuple(self.data.shape)} does not hold a [{self.rows}, {self.cols}] weight"
            )

    @property
    def format(self) -> str:
        return f"gguf-{self.qtype}"

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"data": self.data}

    @property
    def row_bytes(self) -> int:
        return self.cols // block_size(self.qtype) * BLOCK_BYTES[self.qtype]

    def dequantize(self) -> torch.Tensor:
        """The float32 weight [rows, cols] (as `gguf.quants.dequantize` computes it)."""
        import numpy as np
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        raw = self.data.contiguous().numpy()
        out = dequantize(raw, GGMLQuantizationType[self.qtype])
        return torch.from_numpy(np.asarray(out, dtype=np.float32).reshape(self.rows, self.cols).copy())

    @staticmethod
    def concat(parts: Iterable[BlockWeight]) -> BlockWeight:
        """Stack weights of one format along the rows (fused q/k/v or gate/up); raises if the formats or
        widths differ."""
        parts = list(parts)
        formats = {(p.qtype, p.cols) for p in parts}
        if len(formats) != 1:
            raise ValueError(f"parts of different formats cannot be fused: {sorted(formats)}")
        data = torch.cat([p.data for p in parts]) if len(parts) > 1 else parts[0].data
        return BlockWeight(parts[0].qtype, data.contiguous(), sum(p.rows for p in parts), parts[0].cols)


def iter_block_weights(source, config, qtypes: Iterable[str]) -> Iterator[tuple[str, BlockWeight]]:
    """Yield `(hugging_face_name, BlockWeight)` for the checkpoint's 2-D weights stored in one of `qtypes`
    (none for formats that store no blocks, such as safetensors)."""
    qtypes = frozenset(qtypes)
    if source.format != "gguf" or not qtypes:
        return iter(())
    from tgi.core.loading.gguf_loader import iter_gguf_blocks

    return (
        (name, BlockWeight(qtype, _mapped_tensor(data), rows, cols))
        for name, qtype, data, rows, cols in iter_gguf_blocks(source.path, config, qtypes)
    )


def stored_block_formats(source) -> dict[str, tuple[str, int, int]]:
    """Hugging Face name -> (stored format, rows, cols) of the checkpoint's 2-D weights where the format
    stores blocks (GGUF: its type names, block formats or not); {} for other formats."""
    if source.format != "gguf":
        return {}
    from tgi.core.loading.gguf_loader import gguf_stored_formats

    return gguf_stored_formats(source.path)


def _mapped_tensor(data) -> torch.Tensor:
    """A tensor over `data`'s bytes, not copied (a read-only view of the file's memory map: the kernels
    read it once to pack or fuse it and nothing writes to it)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch warns on read-only arrays
        return torch.from_numpy(data)
