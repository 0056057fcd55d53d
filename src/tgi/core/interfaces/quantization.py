"""Quantized weights across the core <-> backend boundary (no framework here: no torch, no jax).

What crosses: the `--quantize` values users name (TGI's), the names of the weight formats kernels compute
with, and a `QuantizationSpec` saying how a model's linear layers are quantized (read from the checkpoint's
`quantization_config`, or asked for with `--quantize` and made at load time).

A backend states the formats it computes with through `Backend.weight_formats(dtype)` (format name -> the
kernel that computes it, for a model whose activations are in `dtype`); the runner refuses a model whose
format is not among them, with `UnsupportedError` naming the format and the supported ones. Torch backends
make the kernels through `tgi.core.torch.TorchBackend.quantized_linear` (see `tgi.core.quant`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: TGI's `--quantize` values, all accepted by the launcher; which ones a model and backend serve is decided at
#: start-up (an unsupported one fails there with the reason)
QUANTIZE_METHODS = (
    "awq",
    "bitsandbytes",
    "bitsandbytes-fp4",
    "bitsandbytes-nf4",
    "compressed-tensors",
    "eetq",
    "exl2",
    "fp8",
    "gptq",
    "marlin",
)

#: weight formats: the layout kernels receive, name -> what it is. GGUF block formats are named
#: "gguf-<ggml type>" (e.g. "gguf-Q4_0"; see `tgi.core.loading.block_weights`).
WEIGHT_FORMATS = {
    "gptq-int4": "GPTQ 4-bit: int32 qweight [in/8, out] packed along the input, qzeros, scales per group, g_idx",
    "gptq-int8": "GPTQ 8-bit: int32 qweight [in/4, out] packed along the input, qzeros, scales per group, g_idx",
    "awq-int4": "AWQ GEMM 4-bit: int32 qweight [in, out/8] in AWQ's interleaved nibble order, qzeros, scales",
    "fp8": "float8_e4m3fn [out, in] with a float32 scale per output row (per-tensor scales expanded)",
    "int8": "int8 [out, in] with a scale per output row, symmetric (EETQ's weight-only scheme)",
    "bnb-nf4": "bitsandbytes NF4 (4-bit NormalFloat, blocks of 64)",
    "bnb-fp4": "bitsandbytes FP4 (blocks of 64)",
    "bnb-int8": "bitsandbytes LLM.int8() weights (int8 per row)",
}

GGUF_FORMAT_PREFIX = "gguf-"


@dataclass(frozen=True)
class QuantizationSpec:
    """How a model's linear layers are quantized, resolved once at load (see `tgi.core.quant.config`).

    `exclude` names modules that stay dense (the checkpoint's `modules_to_not_convert` / compressed-tensors'
    `ignore`; the output head unless the checkpoint quantized it)."""

    method: str  # the `--quantize` value (one of QUANTIZE_METHODS) this is, given or detected
    weight_format: str  # the quantized linears' format (a WEIGHT_FORMATS key)
    source: Literal["checkpoint", "load-time"]  # packed tensors read as stored, or quantized while loading
    bits: int
    group_size: int | None = None  # input channels per scale; None: one scale per output row
    desc_act: bool = False  # GPTQ act-order: groups follow g_idx, not the input order
    sym: bool = True  # symmetric (no zero points that differ from the middle of the range)
    # GPTQ checkpoints of format "gptq" (v1) store zero points minus one; "gptq_v2" stores them as they are
    zeros_minus_one: bool = False
    exclude: tuple[str, ...] = ("lm_head",)
    activation_scale: Literal["none", "static", "dynamic"] = "none"  # FP8 checkpoints' input activations

    def describe(self) -> str:
        """One line for the start-up log and `/info`, e.g. "gptq (gptq-int4, group 128, act-order)"."""
        parts = [self.weight_format]
        if self.group_size:
            parts.append(f"group {self.group_size}")
        if self.desc_act:
            parts.append("act-order")
        if not self.sym:
            parts.append("asymmetric")
        parts.append("from the checkpoint" if self.source == "checkpoint" else "quantized at load")
        return f"{self.method} ({', '.join(parts)})"


@dataclass(frozen=True)
class QuantizationInfo:
    """The quantization a loaded model runs with (`ModelInfo.quantization`, shown in `/info`)."""

    method: str  # the `--quantize` value (TGI's name)
    weight_format: str  # a WEIGHT_FORMATS key or "gguf-<type>[,...]"
    source: str  # "checkpoint" or "load-time"
    num_linears: int  # linear layers computed with quantized weights
    kernel: str  # the kernel(s) that compute them, as the backend names them
    description: str  # `QuantizationSpec.describe()`
