"""bfloat16 matrix products with weights prepacked once for oneDNN (AMX / AVX-512-BF16).

Without prepacking, each bfloat16 `F.linear` on the CPU reorders the whole weight into oneDNN's blocked
layout again, every call. Packed once, small products are faster with the same results (alone: [8, 576] x
[576, 1536] 72 -> 35 us). Measured inside the default model's decode step (interleaved A/B, medians of 48
steps, 2 cores): batch 1 46.1 -> 36.2 ms (x1.27), batch 8 59.9 -> 49.4 ms (x1.21), batch 16-32 no gain
(x0.98-1.02). So only inputs of at most `MAX_PACKED_ROWS` rows use the packed weight; larger ones (bigger
decode batches, prefill chunks) keep the plain product. The packed copy costs one more copy of each weight.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from tgi.core.quant.kernels import QuantizedLinearKernel

#: inputs with at most this many rows use the packed weight (above it, no gain was measured in the model)
MAX_PACKED_ROWS = 16


def max_block_rows(impls: list[str]) -> int:
    """Inputs with at most this many rows use the GGUF block kernel where the checkpoint has blocks
    (`TGI_CPU_BLOCK_ROWS` overrides). Measured on the default model, 2 cores: on the Intel Xeon with AMX
    the block kernel wins up to 64 rows (decode step batch 32: 60.0 vs 76.8 ms dense; 64-row prefill: even;
    256 rows: 289 vs 202 ms dense). On the AMD EPYC (AVX512-BF16, no AMX: oneDNN's dense products run on
    AVX512-BF16 too) the AVX512-BF16 block kernel wins up to 64 rows as well ([M, 576] x [576, 1536]: M=8
    31 vs 42 us, M=32 109 vs 160 us, M=64 216 vs 227 us); on the Xeon it lost to AMX's dense products above
    a few rows, but there the AMX block kernel serves those rows."""
    if os.environ.get("TGI_CPU_BLOCK_ROWS"):
        return int(os.environ["TGI_CPU_BLOCK_ROWS"])
    return 64 if "amx" in impls or "avx512-bf16" in impls else 0


def max_block_rows_f32() -> int:
    """For float32 models (CPUs without bfloat16 arithmetic): inputs of at most this many rows use the
    float32 block kernel (AVX2; `TGI_CPU_BLOCK_ROWS` overrides). Measured on the AMD EPYC, 2 cores, with
    the dense float32 weight still in cache (in the model it is not: 540 MB of float32 weights against
    85 MB of blocks): [M, 576] x [576, 1536] Q4_1 M=1 37 vs 51 us, M=4 79 vs 158, M=16 239 vs 246, M=64
    901 vs 711; the Q8_0 head [M, 576] x [576, 49152] M=1 1.0 vs 7.0 ms, M=16 7.6 vs 14.7."""
    if os.environ.get("TGI_CPU_BLOCK_ROWS"):
        return int(os.environ["TGI_CPU_BLOCK_ROWS"])
    return 16


def block_rows(dtype: str, impls: list[str]) -> int:
    """The most rows a block kernel takes for a model in `dtype` (see the two functions above)."""
    return max_block_rows_f32() if dtype == "float32" else max_block_rows(impls)


#: the block kernel's implementation (`tgi.backends.cpu.native.BLOCK_IMPLS`): "auto" picks the fastest here
BLOCK_IMPL = os.environ.get("TGI_CPU_BLOCK_IMPL", "auto")


def prepacking_supported() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


class PackedLinearKernel:
    """A `linear_kernel` (see `tgi.core.models.layers.linear`) for one bfloat16 weight [out, in]."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach())

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.dim() == 2 and x.shape[0] <= MAX_PACKED_ROWS and x.dtype == self.weight.dtype:
            return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, bias, "none", [], "")
        return F.linear(x, self.weight, bias)


class BlockLinearKernel(QuantizedLinearKernel):
    """The seam's kernel (`tgi.core.quant.kernels`) over a checkpoint's GGUF blocks (a `BlockWeight`) for
    inputs of at most `max_rows` rows in the model's dtype (bfloat16, or float32 on CPUs without bfloat16
    arithmetic), where reading 4.5-8.5 bits per weight instead of 16 or 32 pays; the seam sends larger
    inputs to the dense weight, which the GGUF path keeps beside the blocks (one more copy of each weight:
    for the default model 85 MB of blocks beside 270 MB of bfloat16)."""

    def __init__(self, block, max_rows: int) -> None:
        from tgi.backends.cpu import native

        self.qtype, self.rows, self.cols = block.qtype, block.rows, block.cols
        self.packed = native.block_pack(block.data, block.qtype, block.rows, block.cols)
        self.max_rows = max_rows
        self.impl = BLOCK_IMPL
        self.name = f"cpu-native GGUF {block.qtype} block linear (<= {max_rows} rows)"
        self._native = native

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return self._native.block_linear(
            x, self.packed, self.qtype, self.rows, self.cols, bias, impl=self.impl
        )

    def release_source(self) -> bool:
        return True  # the packed copy is the kernel's own


def prepack_linears(model: torch.nn.Module, block_rows: int = 0) -> int:
    """Attach packed kernels to every bfloat16 linear of `model` that accepts one (and has its dense weight:
    not a meta tensor); returns how many. Linears with GGUF blocks attached (`quant_weight`) are skipped
    when their block kernel takes inputs of `block_rows` >= `MAX_PACKED_ROWS` rows: the packed weight
    would serve no input (a 1B-class model: 4.5 s of its load and a copy of its weights)."""
    count = 0
    for module in model.modules():
        if (
            "linear_kernel" in dir(type(module))
            and module.weight.dtype == torch.bfloat16
            and not module.weight.is_meta
            and not (getattr(module, "quant_weight", None) is not None and block_rows >= MAX_PACKED_ROWS)
        ):
            module.linear_kernel = PackedLinearKernel(module.weight)
            count += 1
    return count
