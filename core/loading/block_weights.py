"""Block-quantized weights as the checkpoint stores them (llama.cpp's GGUF block formats), for backends
whose kernels compute with them directly instead of with the dequantized copy.

A `BlockWeight` is attached to a linear module (`module.block_weight`) beside its dense weight, which every
backend can still use; a backend that has a kernel for `qtype` may use the blocks instead (see
`TorchBackend.block_weight_types`). Both hold the same weights: the blocks dequantize to the dense
float32 values exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

#: bytes per block of 32 weights: fp16 scale (+ fp16 min for Q4_1) and the packed values
BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}
BLOCK_SIZE = 32


@dataclass(frozen=True)
class BlockWeight:
    """A [rows, cols] weight in a GGUF block format, row-major: `data` is uint8 [rows, cols / 32 * bytes]."""

    qtype: str  # "Q4_0", "Q4_1" or "Q8_0"
    data: torch.Tensor
    rows: int
    cols: int

    def __post_init__(self) -> None:
        if self.qtype not in BLOCK_BYTES:
            raise ValueError(f"unknown block format {self.qtype!r} (known: {sorted(BLOCK_BYTES)})")
        if self.cols % BLOCK_SIZE or tuple(self.data.shape) != (self.rows, self.row_bytes):
            raise ValueError(
                f"{self.qtype} data of shape {tuple(self.data.shape)} does not hold a [{self.rows}, {self.cols}] weight"
            )

    @property
    def row_bytes(self) -> int:
        return self.cols // BLOCK_SIZE * BLOCK_BYTES[self.qtype]

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
        (name, BlockWeight(qtype, torch.from_numpy(data), rows, cols))
        for name, qtype, data, rows, cols in iter_gguf_blocks(source.path, config, qtypes)
    )
