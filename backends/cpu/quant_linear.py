"""The CPU backend's kernels for quantized weights (the seam of `tgi.core.quant.kernels`), keeping the
weights packed:

- "gptq-int4", "awq-int4": PyTorch's CPU int4 pack-mm (`aten._weight_int4pack_mm_for_cpu`), the weight
  repacked once with `_convert_weight_to_int4pack_for_cpu`, scale and zero per group. Act-order GPTQ
  (g_idx) is served by permuting the weight's input channels once so that groups are contiguous, and the
  input's columns at each call (`x[:, perm]`).
- "int8" (EETQ's scheme) and symmetric per-row "gptq-int8": int8 weight-only mm (`aten._weight_int8pack_mm`).
- "gptq-int8" with groups or zero points, "fp8": the packed weight (int8 / float8, 1 byte per weight) is
  dequantized into a temporary of the activation dtype at each call, then one dense product; the dense
  weight is never kept.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tgi.core.interfaces.types import UnsupportedError
from tgi.core.quant.kernels import QuantizedLinearKernel
from tgi.core.quant.weights import AWQWeight, FP8Weight, GPTQWeight, Int8Weight, QuantizedWeight

#: group sizes the int4 pack-mm takes; a weight's group must be a multiple of one of them
INT4_GROUPS = (256, 128, 64, 32)

#: format -> kernel, as `CpuBackend.weight_formats` reports them (GGUF's block formats are added there)
CPU_FORMATS = {
    "gptq-int4": "aten int4 pack-mm (CPU)",
    "awq-int4": "aten int4 pack-mm (CPU)",
    "gptq-int8": "aten int8 weight-only mm (per-row, symmetric) or int8 dequantized per call (groups)",
    "int8": "aten int8 weight-only mm (CPU)",
    "fp8": "float8 weights widened to bfloat16 per call by integer ops, then a dense product",
}
#: with the `bitsandbytes` package installed (the `bnb` extra)
BNB_FORMATS = {f"bnb-{t}": f"bitsandbytes {t} matmul (CPU)" for t in ("nf4", "fp4", "int8")}


def _activation(dtype: str) -> torch.dtype:
    if dtype not in ("bfloat16", "float32"):
        raise UnsupportedError(
            f"the CPU's quantized kernels take bfloat16 or float32 activations, not {dtype}"
        )
    return torch.bfloat16 if dtype == "bfloat16" else torch.float32


class Int4PackKernel(QuantizedLinearKernel):
    """GPTQ / AWQ 4-bit weights on `aten._weight_int4pack_mm_for_cpu`."""

    def __init__(self, weight: GPTQWeight | AWQWeight, dtype: torch.dtype) -> None:
        q = weight.int_weight()  # [rows, cols] int32 in [0, 16)
        zeros = weight.zero_points()  # [groups, rows]
        scales = weight.scales.float()  # [groups, rows]
        group = weight.group_size
        self.perm = None
        if isinstance(weight, GPTQWeight) and weight.g_idx is not None:
            g = weight.group_index()
            counts = torch.bincount(g, minlength=scales.shape[0])
            if bool((counts != group).any()):
                raise UnsupportedError(f"GPTQ g_idx with groups of unequal sizes ({counts.tolist()[:8]}...)")
            self.perm = torch.argsort(g, stable=True)
            q = q[:, self.perm]
        kernel_group = next((k for k in INT4_GROUPS if group % k == 0), None)
        if kernel_group is None or weight.cols % kernel_group:
            raise UnsupportedError(
                f"{weight.format}: group size {group} over {weight.cols} inputs is not a multiple of one the "
                f"CPU int4 kernel takes ({', '.join(map(str, INT4_GROUPS))})"
            )
        repeat = group // kernel_group
        # w = (q - z) * s = (q - 8) * s + (8 - z) * s: the kernel's scale-and-zero form
        zero_f = (8 - zeros.float()) * scales
        sz = torch.stack([scales, zero_f], dim=-1).repeat_interleave(repeat, dim=0)[
            : weight.cols // kernel_group
        ]
        self.scales_zeros = sz.to(dtype).contiguous()  # [cols / kernel_group, rows, 2]
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.contiguous(), 1)
        self.group = kernel_group
        self.dtype = dtype
        self.name = "aten int4 pack-mm" + (" (act-order)" if self.perm is not None else "")

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.perm is not None:
            x = x.index_select(-1, self.perm)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.contiguous(), self.packed, self.group, self.scales_zeros
        )
        return y if bias is None else y + bias

    def release_source(self) -> bool:
        return True


class Int8PackKernel(QuantizedLinearKernel):
    """Symmetric int8 weights with one scale per row on `aten._weight_int8pack_mm`."""

    name = "aten int8 weight-only mm"

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> None:
        self.weight = weight.contiguous()  # int8 [rows, cols]
        self.scale = scale.to(dtype).contiguous()  # [rows]

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        y = torch.ops.aten._weight_int8pack_mm(x.contiguous(), self.weight, self.scale)
        return y if bias is None else y + bias


class DequantizePerCallKernel(QuantizedLinearKernel):
    """One byte per weight kept (int8 with per-group scale and zero, or float8 with a per-row scale); each
    call dequantizes into a temporary of the activation dtype and multiplies."""

    def __init__(self, weight: QuantizedWeight, dtype: torch.dtype) -> None:
        self.dtype = dtype
        if isinstance(weight, FP8Weight):
            self.values, self.scale = weight.weight, weight.scale.to(dtype)[:, None]
            self.zero = None
            self.name = "float8 dequantized per call"
        else:  # grouped GPTQ int8: int8 values (q - 128) with per-group zero offsets and scales
            g = weight.group_index()
            self.values = (weight.int_weight() - 128).to(torch.int8)
            self.scale = weight.scales.to(dtype)[g].T.contiguous()  # [rows, cols]
            self.zero = (weight.zero_points() - 128).to(dtype)[g].T.contiguous()
            self.name = "int8 dequantized per call"

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        w = self.values.to(self.dtype)
        if self.zero is not None:
            w = w - self.zero
        return F.linear(x, w * self.scale, bias)

    def release_source(self) -> bool:
        return True


class BnbKernel(QuantizedLinearKernel):
    """bitsandbytes' own CPU products: `matmul_4bit` (NF4 / FP4) and `matmul` (int8, LLM.int8()'s
    weights without outliers: the weights are int8 throughout)."""

    def __init__(self, weight, dtype: torch.dtype) -> None:
        from tgi.core.quant.bnb import import_bitsandbytes

        self.bnb = import_bitsandbytes()
        self.weight = weight
        self.dtype = dtype
        self.name = f"bitsandbytes {weight.quant_type} matmul (CPU)"
        if weight.quant_type == "int8":
            state = self.bnb.MatmulLtState()
            state.has_fp16_weights = False
            state.CB, state.SCB = weight.data, weight.state
            self.state = state

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        w = self.weight
        if w.quant_type == "int8":
            y = self.bnb.matmul(x, w.data, state=self.state)
        else:
            y = self.bnb.matmul_4bit(x, w.data.t(), quant_state=w.state)
        y = y.to(x.dtype)
        return y if bias is None else y + bias


def bnb_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("bitsandbytes") is not None


class FP8BitsKernel(QuantizedLinearKernel):
    """float8_e4m3fn weights kept as their bytes; each call widens them to bfloat16 with integer ops
    (sign | (exponent-and-mantissa << 4) + 120 << 7: exact for normal numbers) and multiplies, then applies
    the row scales to the output. Subnormal codes and zeros (exponent 0), which that formula gets wrong,
    are corrected by a gather and an index_add of their differences (78 of 885k weights in a
    [1536, 576] Gaussian weight scaled per row). torch's own float8 -> bfloat16 conversion takes ~10 ms for a [1536, 576] weight on this CPU,
    this ~0.3 ms (bfloat16's product alone: 0.06 ms; `torch._scaled_mm` on the CPU: ~8 ms)."""

    name = "float8 widened per call by integer ops (CPU)"

    def __init__(self, weight: FP8Weight, dtype: torch.dtype) -> None:
        codes = weight.weight.view(torch.int8)
        em = codes.to(torch.int16) & 0x7F
        if bool((em == 0x7F).any()):
            raise UnsupportedError("float8_e4m3fn weights holding NaN cannot be computed")
        self.codes = codes
        self.scale = weight.scale.to(dtype)  # [rows], applied to the output
        self.dtype = dtype
        small = (em < 8).nonzero()  # [n, 2] rows, cols of subnormals and zeros
        m = em[small[:, 0], small[:, 1]].float()
        sign = torch.where(codes[small[:, 0], small[:, 1]] < 0, -1.0, 1.0)
        # fast value (2^-7 * (1 + m/8)) minus the true one (m * 2^-9), signed
        diff = sign * (2.0**-7 + m * 2.0**-10 - m * 2.0**-9)
        # y[:, r] -= diff * x[:, c] for each such (r, c): a gather and an index_add per call
        self.fix_rows, self.fix_cols, self.fix_diff = small[:, 0], small[:, 1], diff.to(dtype)
        self.fixup = len(small) > 0

    def widened(self) -> torch.Tensor:
        u = self.codes.to(torch.int16)
        return (((u & 0x7F) << 4) + 15360 | (u & -32768)).view(torch.bfloat16)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        w = self.widened()
        y = F.linear(x, w if x.dtype == torch.bfloat16 else w.to(x.dtype))
        if self.fixup:
            y.index_add_(1, self.fix_rows, x.index_select(1, self.fix_cols) * self.fix_diff, alpha=-1)
        y = y * self.scale
        return y if bias is None else y + bias

    def release_source(self) -> bool:
        return True


def cpu_quantized_linear(weight: QuantizedWeight, dtype: str) -> QuantizedLinearKernel:
    """The CPU kernel for `weight` (one of `CPU_FORMATS`) with `dtype` activations."""
    act = _activation(dtype)
    if isinstance(weight, (AWQWeight, GPTQWeight)) and weight.format.endswith("int4"):
        return Int4PackKernel(weight, act)
    if isinstance(weight, Int8Weight):
        return Int8PackKernel(weight.weight, weight.scale, act)
    if isinstance(weight, GPTQWeight):  # 8 bits
        zeros = weight.zero_points()
        if weight.group_size == weight.cols and bool((zeros == 128).all()):
            scale = weight.scales.float().reshape(-1)
            return Int8PackKernel((weight.int_weight() - 128).to(torch.int8), scale, act)
        return DequantizePerCallKernel(weight, act)
    if isinstance(weight, FP8Weight):
        return FP8BitsKernel(weight, act)
    if weight.format.startswith("bnb-"):
        return BnbKernel(weight, act)
    raise UnsupportedError(f"the CPU backend has no kernel for {weight.format} weights")
