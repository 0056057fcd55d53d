"""Quantized linear weights as typed objects: the tensors as the checkpoint (or the load-time quantizer)
stores them, with what a kernel needs to read them.

A `QuantizedWeight` stands for the [rows, cols] = [out_features, in_features] weight of one linear layer
(`y = x @ W.T`). It is attached to its layer as `module.quant_weight` (see `tgi.core.models.layers.Linear`);
the backend turns it into a kernel (`TorchBackend.quantized_linear`, `tgi.core.quant.kernels`). Every format
can `dequantize()` itself to float32: that is the reference the kernels are tested against, never a path
the server takes by itself.

Formats (names: `tgi.core.interfaces.quantization.WEIGHT_FORMATS`): `GPTQWeight` ("gptq-int4",
"gptq-int8"), `AWQWeight` ("awq-int4"), `FP8Weight` ("fp8"), `Int8Weight` ("int8"), and the GGUF blocks
(`tgi.core.loading.block_weights.BlockWeight`, "gguf-<type>"). Fused layers (q/k/v, gate/up) hold one weight
made with `concat` of the parts along the rows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tgi.core.quant.packing import unpack_awq, unpack_cols, unpack_rows


class QuantizedWeight(ABC):
    """A [rows, cols] linear weight in a quantized format. Subclasses are frozen dataclasses with `rows`
    and `cols` fields and the format's tensors, on the model's device, as stored."""

    rows: int  # output features
    cols: int  # input features

    @property
    @abstractmethod
    def format(self) -> str:
        """The format's name (a `WEIGHT_FORMATS` key, or "gguf-<type>")."""

    @abstractmethod
    def dequantize(self) -> torch.Tensor:
        """The float32 weight [rows, cols] these tensors stand for (the reference for kernels)."""

    @abstractmethod
    def tensors(self) -> dict[str, torch.Tensor]:
        """The stored tensors by name (for memory accounting and moving)."""

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    @classmethod
    def concat(cls, parts: Sequence[QuantizedWeight]) -> QuantizedWeight:
        """One weight with the parts' rows stacked in order (a fused q/k/v or gate/up layer); raises
        `ValueError` when the parts cannot be fused (other formats, widths, groups or act-orders)."""
        raise ValueError(f"{cls.__name__} weights cannot be fused")


def _same(parts: Sequence[QuantizedWeight], *fields: str) -> None:
    kinds = {(type(p), p.cols, *(getattr(p, f) for f in fields)) for p in parts}
    if len(kinds) != 1:
        raise ValueError(f"parts of different formats or widths cannot be fused: {sorted(map(str, kinds))}")


@dataclass(frozen=True)
class GPTQWeight(QuantizedWeight):
    """GPTQ (AutoGPTQ / GPTQModel layout). `qweight` int32 [cols * bits / 32, rows] packs the integer
    weights along the input dim; `qzeros` int32 [groups, rows * bits / 32] the zero points along the output
    dim; `scales` [groups, rows] (float16 as stored). Input channel i belongs to group `g_idx[i]` (act-order
    checkpoints permute them), or `i // group_size` when `g_idx` is None. W[r, i] = (q[i, r] - z[g, r]) *
    s[g, r] with g = the group of i, where z is the stored zero plus one when `zeros_minus_one` (the
    "gptq" v1 checkpoint format; "gptq_v2" stores z itself)."""

    bits: int
    qweight: torch.Tensor
    qzeros: torch.Tensor
    scales: torch.Tensor
    g_idx: torch.Tensor | None
    group_size: int  # input channels per group (cols for one group per row)
    zeros_minus_one: bool
    rows: int
    cols: int

    def __post_init__(self) -> None:
        if self.bits not in (4, 8):
            raise ValueError(f"GPTQ with {self.bits} bits is not supported (4 or 8)")
        per = 32 // self.bits
        groups = -(-self.cols // self.group_size)
        expect = {
            "qweight": (self.cols // per, self.rows),
            "qzeros": (groups, self.rows // per),
            "scales": (groups, self.rows),
        }
        for name, shape in expect.items():
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(
                    f"GPTQ {name} of shape {tuple(getattr(self, name).shape)} does not fit a "
                    f"[{self.rows}, {self.cols}] weight with {self.bits} bits, group {self.group_size} "
                    f"(expected {shape})"
                )

    @property
    def format(self) -> str:
        return f"gptq-int{self.bits}"

    def group_index(self) -> torch.Tensor:
        """int64 [cols]: the group of each input channel."""
        if self.g_idx is not None:
            return self.g_idx.long()
        return torch.arange(self.cols, device=self.qweight.device) // self.group_size

    def int_weight(self) -> torch.Tensor:
        """int32 [rows, cols] in [0, 2^bits)."""
        return unpack_rows(self.qweight, self.bits).T

    def zero_points(self) -> torch.Tensor:
        """int32 [groups, rows]: the zero points as they apply (the v1 offset added)."""
        zeros = unpack_cols(self.qzeros, self.bits)
        return zeros + 1 if self.zeros_minus_one else zeros

    def dequantize(self) -> torch.Tensor:
        g = self.group_index()
        q = self.int_weight().float()  # [rows, cols]
        z = self.zero_points().float()[g].T  # [rows, cols]
        s = self.scales.float()[g].T
        return (q - z) * s

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {"qweight": self.qweight, "qzeros": self.qzeros, "scales": self.scales}
        return out if self.g_idx is None else {**out, "g_idx": self.g_idx}

    @classmethod
    def concat(cls, parts: Sequence[GPTQWeight]) -> GPTQWeight:
        _same(parts, "bits", "group_size", "zeros_minus_one")
        first = parts[0]
        if first.g_idx is not None and any(not torch.equal(p.g_idx, first.g_idx) for p in parts[1:]):
            raise ValueError("GPTQ parts with different g_idx (act-order) cannot be fused")
        return GPTQWeight(
            first.bits,
            torch.cat([p.qweight for p in parts], dim=1),
            torch.cat([p.qzeros for p in parts], dim=1),
            torch.cat([p.scales for p in parts], dim=1),
            first.g_idx,
            first.group_size,
            first.zeros_minus_one,
            sum(p.rows for p in parts),
            first.cols,
        )


@dataclass(frozen=True)
class AWQWeight(QuantizedWeight):
    """AWQ, GEMM layout. `qweight` int32 [cols, rows / 8] and `qzeros` int32 [groups, rows / 8] pack 8
    nibbles per word along the output dim in AWQ's interleaved order (`tgi.core.quant.packing`); `scales`
    [groups, rows]. W[r, i] = (q[i, r] - z[i // group_size, r]) * s[i // group_size, r]."""

    qweight: torch.Tensor
    qzeros: torch.Tensor
    scales: torch.Tensor
    group_size: int
    rows: int
    cols: int

    def __post_init__(self) -> None:
        groups = -(-self.cols // self.group_size)
        expect = {
            "qweight": (self.cols, self.rows // 8),
            "qzeros": (groups, self.rows // 8),
            "scales": (groups, self.rows),
        }
        for name, shape in expect.items():
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(
                    f"AWQ {name} of shape {tuple(getattr(self, name).shape)} does not fit a "
                    f"[{self.rows}, {self.cols}] weight with group {self.group_size} (expected {shape})"
                )

    @property
    def format(self) -> str:
        return "awq-int4"

    def int_weight(self) -> torch.Tensor:
        """int32 [rows, cols] in [0, 16)."""
        return unpack_awq(self.qweight).T

    def zero_points(self) -> torch.Tensor:
        """int32 [groups, rows]."""
        return unpack_awq(self.qzeros)

    def dequantize(self) -> torch.Tensor:
        g = torch.arange(self.cols, device=self.qweight.device) // self.group_size
        q = self.int_weight().float()
        return (q - self.zero_points().float()[g].T) * self.scales.float()[g].T

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"qweight": self.qweight, "qzeros": self.qzeros, "scales": self.scales}

    @classmethod
    def concat(cls, parts: Sequence[AWQWeight]) -> AWQWeight:
        _same(parts, "group_size")
        return AWQWeight(
            torch.cat([p.qweight for p in parts], dim=1),
            torch.cat([p.qzeros for p in parts], dim=1),
            torch.cat([p.scales for p in parts], dim=1),
            parts[0].group_size,
            sum(p.rows for p in parts),
            parts[0].cols,
        )


@dataclass(frozen=True)
class FP8Weight(QuantizedWeight):
    """float8_e4m3fn `weight` [rows, cols] with a float32 `scale` per row [rows] (a checkpoint's per-tensor
    scale is expanded to its rows, exactly). W = weight * scale[:, None]. `input_scale`: the checkpoint's
    static activation scale (compressed-tensors / FP8 W8A8), kept for kernels that quantize activations;
    None for dynamic or weight-only."""

    weight: torch.Tensor
    scale: torch.Tensor
    rows: int
    cols: int
    input_scale: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.weight.dtype != torch.float8_e4m3fn or tuple(self.weight.shape) != (self.rows, self.cols):
            raise ValueError(f"FP8 weight must be float8_e4m3fn [{self.rows}, {self.cols}]")
        if tuple(self.scale.shape) != (self.rows,):
            raise ValueError(f"FP8 scale of shape {tuple(self.scale.shape)}: expected [{self.rows}]")

    @property
    def format(self) -> str:
        return "fp8"

    def dequantize(self) -> torch.Tensor:
        return self.weight.float() * self.scale.float()[:, None]

    def nan_codes(self) -> int:
        """How many weights are NaN (codes 0x7f and 0xff): a kernel has no defined product for them."""
        return int(((self.weight.view(torch.uint8) & 0x7F) == 0x7F).sum())

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {"weight": self.weight, "scale": self.scale}
        return out if self.input_scale is None else {**out, "input_scale": self.input_scale}

    @classmethod
    def concat(cls, parts: Sequence[FP8Weight]) -> FP8Weight:
        _same(parts)
        scales = [p.input_scale for p in parts if p.input_scale is not None]
        input_scale = torch.stack(scales).max() if len(scales) == len(parts) else None
        return FP8Weight(
            torch.cat([p.weight for p in parts]),
            torch.cat([p.scale for p in parts]),
            sum(p.rows for p in parts),
            parts[0].cols,
            input_scale,
        )


@dataclass(frozen=True)
class Int8Weight(QuantizedWeight):
    """int8 `weight` [rows, cols], symmetric, with a float32 `scale` per row [rows]: W = weight * scale."""

    weight: torch.Tensor
    scale: torch.Tensor
    rows: int
    cols: int

    def __post_init__(self) -> None:
        if self.weight.dtype != torch.int8 or tuple(self.weight.shape) != (self.rows, self.cols):
            raise ValueError(f"int8 weight must be int8 [{self.rows}, {self.cols}]")
        if tuple(self.scale.shape) != (self.rows,):
            raise ValueError(f"int8 scale of shape {tuple(self.scale.shape)}: expected [{self.rows}]")

    @property
    def format(self) -> str:
        return "int8"

    def dequantize(self) -> torch.Tensor:
        return self.weight.float() * self.scale.float()[:, None]

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"weight": self.weight, "scale": self.scale}

    @classmethod
    def concat(cls, parts: Sequence[Int8Weight]) -> Int8Weight:
        _same(parts)
        return Int8Weight(
            torch.cat([p.weight for p in parts]),
            torch.cat([p.scale for p in parts]),
            sum(p.rows for p in parts),
            parts[0].cols,
        )


@dataclass(frozen=True)
class RowParts(QuantizedWeight):
    """A fused linear (q/k/v, gate/up) whose parts are stored in formats that cannot be concatenated (a
    Q4_K_M GGUF keeps some layers' `attn_v` in Q6_K beside Q4_K `attn_q`/`attn_k`): the parts in order, each
    computed by the backend's kernel for its own format (`tgi.core.quant.kernels.RowPartsKernel`), their
    outputs side by side. Not a format of its own: a backend is asked only for its parts' formats."""

    parts: tuple[QuantizedWeight, ...]
    rows: int
    cols: int

    def __post_init__(self) -> None:
        if len(self.parts) < 2 or {p.cols for p in self.parts} != {self.cols}:
            raise ValueError("RowParts holds two or more weights of the same width")
        if sum(p.rows for p in self.parts) != self.rows:
            raise ValueError(f"RowParts: the parts' rows do not add up to {self.rows}")

    @classmethod
    def of(cls, parts: Sequence[QuantizedWeight]) -> RowParts:
        return cls(tuple(parts), sum(p.rows for p in parts), parts[0].cols)

    @property
    def format(self) -> str:
        return "+".join(p.format for p in self.parts)

    def dequantize(self) -> torch.Tensor:
        return torch.cat([p.dequantize() for p in self.parts])

    def tensors(self) -> dict[str, torch.Tensor]:
        return {f"{i}.{name}": t for i, p in enumerate(self.parts) for name, t in p.tensors().items()}
