"""Quantized linear layers on the Triton backends: the `tgi.core.quant.kernels` seam's kernels over
`kernels/quant_int.py` (GPTQ 4/8-bit, AWQ 4-bit) and `kernels/quant_w8.py` (FP8, int8).

Every kernel takes every row count (`max_rows` None: the layer keeps no dense weight) and computes with the
checkpoint's packed tensors, dequantizing tile by tile inside the GEMM. They are used as stored, except
act-order GPTQ weights: their input rows are sorted by group once, at construction (the qweight repacked in
that order, the original released), so that groups are contiguous and the kernel reads no g_idx; each call
then gathers x's columns in the same order. Formats not in `WEIGHT_FORMATS` (bitsandbytes NF4/FP4/int8,
GGUF blocks) are refused by the seam with these names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tgi.core.interfaces.types import UnsupportedError
from tgi.core.quant.kernels import QuantizedLinearKernel
from tgi.core.quant.packing import unpack_rows

if TYPE_CHECKING:
    from tgi.core.quant.weights import GPTQWeight, QuantizedWeight

#: the activation dtypes the kernels take
ACTIVATION_DTYPES = ("bfloat16", "float16", "float32")
#: format -> the kernel that computes it (shown at start-up and in /info)
WEIGHT_FORMATS = {
    "gptq-int4": "triton gptq int4 (dequantize in the GEMM)",
    "gptq-int8": "triton gptq int8 (dequantize in the GEMM)",
    "awq-int4": "triton awq int4 (dequantize in the GEMM)",
    "fp8": "triton fp8 w8a16 (dequantize in the GEMM)",
    "int8": "triton int8 w8a16 (dequantize in the GEMM)",
}


def weight_formats(dtype: str) -> dict[str, str]:
    """`Backend.weight_formats` of the Triton backends: every format above, for 16- and 32-bit activations."""
    return dict(WEIGHT_FORMATS) if dtype in ACTIVATION_DTYPES else {}


class TritonQuantizedLinear(QuantizedLinearKernel):
    """x @ W.T + bias with W one `QuantizedWeight` of a format in `WEIGHT_FORMATS` (see `quantized_linear`)."""

    def __init__(self, weight: QuantizedWeight, split: int | None = None) -> None:
        self.name = WEIGHT_FORMATS[weight.format] + (f", {split} split along K" if split else "")
        self._product, held, self._repacked = _product_for(weight, split)
        #: bytes of the tensors this kernel computes with (the packed weight, scales, zero points, ...)
        self.nbytes = sum(t.numel() * t.element_size() for t in held)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        y = self._product(x)
        return y if bias is None else y.add_(bias)

    def release_source(self) -> bool:
        """True for act-order GPTQ, whose qweight this kernel repacked (the stored one is no longer needed)."""
        return self._repacked


def quantized_linear(weight: QuantizedWeight, dtype: str, split: int | None = None) -> TritonQuantizedLinear:
    """`TorchBackend.quantized_linear` of the Triton backends; raises `UnsupportedError` for another format
    or activation dtype. `split`: programs along K for every call (1: a row's sum never depends on the row
    count, `--deterministic`); None: `kernels.quant_int.split_k`'s choice by shape."""
    if weight.format not in WEIGHT_FORMATS or dtype not in ACTIVATION_DTYPES:
        supported = ", ".join(WEIGHT_FORMATS)
        raise UnsupportedError(
            f"the Triton quantized kernels compute {supported} with {', '.join(ACTIVATION_DTYPES)} "
            f"activations, not {weight.format} with {dtype}"
        )
    return TritonQuantizedLinear(weight, split)


def _trivial_groups(g_idx: torch.Tensor | None, group_size: int) -> bool:
    """True when g_idx is input row // group_size (GPTQ checkpoints without act-order store it too): the
    kernel then computes the group instead of reading it."""
    if g_idx is None:
        return True
    expect = torch.arange(g_idx.numel(), device=g_idx.device) // group_size
    return bool(torch.equal(g_idx.long(), expect))


def sort_act_order(weight: GPTQWeight) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(perm int64 [K], qweight with its input rows in perm's order, packed as GPTQ packs): sorting the rows
    by g_idx makes every group's rows contiguous, so W.T[perm] is a weight without g_idx and
    x @ W.T = x[:, perm] @ W.T[perm]. None when the sorted groups are not whole runs of group_size rows."""
    bits, k = weight.bits, weight.cols
    groups = weight.g_idx.long()
    perm = torch.argsort(groups, stable=True)
    if not torch.equal(groups[perm], torch.arange(k, device=groups.device) // weight.group_size):
        return None
    per = 32 // bits
    q = unpack_rows(weight.qweight, bits)[perm].to(torch.int64)  # [K, N] in [0, 2**bits)
    shifts = torch.arange(0, 32, bits, device=q.device, dtype=torch.int64)
    words = (q.view(k // per, per, -1) << shifts[None, :, None]).sum(1)  # disjoint bits: sum == or
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return perm, words


def _product_for(weight: QuantizedWeight, split: int | None = None):
    """(x -> x @ W.T, the tensors it reads, whether the stored weight was repacked); `split` as
    `quantized_linear` takes it."""
    from tgi.backends.triton_common.kernels.quant_int import awq_gemm, gptq_gemm
    from tgi.backends.triton_common.kernels.quant_w8 import fp8_gemm, int8_gemm

    fmt = weight.format
    if fmt.startswith("gptq-"):
        w = weight
        bits, group_size, qzeros, scales = w.bits, w.group_size, w.qzeros, w.scales
        offset = 1 if w.zeros_minus_one else 0
        qweight, g_idx, perm = w.qweight, None, None
        if not _trivial_groups(w.g_idx, group_size):
            sorted_ = sort_act_order(w)
            if sorted_ is None:  # groups of unequal sizes: read each row's group through g_idx
                g_idx = w.g_idx.to(torch.int32).contiguous()
            else:
                perm, qweight = sorted_

        def gptq(x):
            if perm is not None:
                x = x.index_select(-1, perm)
            return gptq_gemm(
                x,
                qweight,
                qzeros,
                scales,
                g_idx,
                bits=bits,
                group_size=group_size,
                zero_offset=offset,
                split=split,
            )

        held = [t for t in (qweight, qzeros, scales, g_idx, perm) if t is not None]
        return gptq, held, perm is not None
    if fmt == "awq-int4":
        w = weight
        held = [w.qweight, w.qzeros, w.scales]
        return (
            (lambda x: awq_gemm(x, w.qweight, w.qzeros, w.scales, group_size=w.group_size, split=split)),
            held,
            False,
        )
    held = [weight.weight, weight.scale]
    if fmt == "fp8":
        return (lambda x: fp8_gemm(x, weight.weight, weight.scale, split=split)), held, False
    return (lambda x: int8_gemm(x, weight.weight, weight.scale, split=split)), held, False
