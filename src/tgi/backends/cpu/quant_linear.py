"""The CPU backend's kernels for quantized weights (the seam of `tgi.core.quant.kernels`), keeping the
weights packed:

- "gptq-int4", "awq-int4": PyTorch's CPU int4 pack-mm (`aten._weight_int4pack_mm_for_cpu`), the weight
  repacked once with `_convert_weight_to_int4pack_for_cpu`, scale and zero per group. Act-order GPTQ
  (g_idx) is served by permuting the weight's input channels once so that groups are contiguous, and the
  input's columns at each call (`x[:, perm]`).
- "int8" (EETQ's scheme) and symmetric per-row "gptq-int8": int8 weight-only mm (`aten._weight_int8pack_mm`).
- "fp8": the native float8 linear (`FP8NativeKernel`; `FP8BitsKernel`'s torch integer ops where the native
  kernels do not build or `TGI_CPU_FP8_NATIVE=0`).
- int8, int4 and fp8 inputs of more than `WIDE_ROWS` rows (prefill chunks; every row count for aten's int8
  and int4 kernels with float32 activations, which run scalar) widen the weight per call into a temporary
  of the activation dtype, freed after the call, and take the dense product: the weight stays stored
  quantized.
- "gptq-int8" with groups or zero points: the int8 codes are dequantized into a temporary of the activation
  dtype at each call, then one dense product; the dense weight is never kept.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from tgi.core.interfaces.types import UnsupportedError
from tgi.core.quant.kernels import QuantizedLinearKernel
from tgi.core.quant.weights import AWQWeight, FP8Weight, GPTQWeight, Int8Weight, QuantizedWeight

#: group sizes the int4 pack-mm takes; a weight's group must be a multiple of one of them
INT4_GROUPS = (256, 128, 64, 32)

#: format -> kernel, as `CpuBackend.weight_formats` reports them (GGUF's block formats are added there)
CPU_FORMATS = {
    "gptq-int4": "aten int4 pack-mm (CPU), widened per call for large inputs",
    "awq-int4": "aten int4 pack-mm (CPU), widened per call for large inputs",
    "gptq-int8": "aten int8 weight-only mm (per-row, symmetric) or int8 dequantized per call (groups)",
    "int8": "aten int8 weight-only mm (CPU), widened per call for large inputs",
    "fp8": "cpu-native float8 linear (AVX512-BF16 / AVX2 / scalar), or torch integer ops where it does not build",
}
#: with the `bitsandbytes` package installed (the `bnb` extra)
BNB_FORMATS = {f"bnb-{t}": f"bitsandbytes {t} matmul (CPU)" for t in ("nf4", "fp4", "int8")}


def _activation(dtype: str) -> torch.dtype:
    if dtype not in ("bfloat16", "float32"):
        raise UnsupportedError(
            f"the CPU's quantized kernels take bfloat16 or float32 activations, not {dtype}"
        )
    return torch.bfloat16 if dtype == "bfloat16" else torch.float32


#: inputs with more rows than this take the dense product on a weight widened per call into a temporary of
#: the activation dtype (freed after the call; the weight stays stored quantized), by kind and dtype; None:
#: never. `TGI_CPU_<KIND>_WIDE_ROWS` overrides. Measured on the AMD EPYC (AVX512-BF16, no AMX), 2 threads,
#: [M, 576] x [576, 1536], medians of 20 interleaved calls, kernel / widened + dense, us:
#: - bfloat16: int8 M=16 101 / 120, M=32 194 / 152, M=512 2964 / 1078; int4 (g64, widened by torch ops)
#:   M=128 646 / 736, M=256 1298 / 992, M=512 2593 / 1519. The native fp8 kernel keeps up with oneDNN's
#:   dense bfloat16 product at every M (M=32 69 vs 71, M=512 841 vs 836): widening it never pays.
#: - float32: aten's int8 and int4 kernels take a scalar path (M=1 283 and 634 us, M=32 9980 and 20241)
#:   that the widened product beats at every row count (M=1 88 and 418, M=32 499 and 956); fp8 (native,
#:   AVX2) M=32 478 / 591, M=64 901 / 864.
WIDE_ROWS: dict[tuple[str, torch.dtype], int | None] = {
    ("INT8", torch.bfloat16): 24,
    ("INT8", torch.float32): 0,
    ("INT4", torch.bfloat16): 192,
    ("INT4", torch.float32): 0,
    ("FP8", torch.bfloat16): None,
    ("FP8", torch.float32): 48,
}


def wide_rows(kind: str, dtype: torch.dtype) -> int | None:
    """See `WIDE_ROWS`."""
    env = os.environ.get(f"TGI_CPU_{kind}_WIDE_ROWS")
    return int(env) if env else WIDE_ROWS[(kind, dtype)]


def unpack_int4pack(packed: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """uint8 [rows, cols] of the 4-bit integers in `_convert_weight_to_int4pack_for_cpu`'s layout on an
    AVX-512 build: blocks of 64 rows, per column 32 bytes, byte d holding rows d and d + 32, byte 16 + d rows
    d + 16 and d + 48, low nibble first; a last block of 16, 32 or 48 rows holds rows 2i and 2i + 1 in byte
    i of each column. `_int4pack_readable` checks it on the weight at hand."""
    flat = packed.view(-1)
    full = rows // 64 * 64
    p = flat[: full * cols // 2].view(full // 64, cols, 2, 16)
    q = torch.stack([p & 15, p >> 4], dim=2)  # [blocks, cols, nibble, half, 16]: row 32 nibble + 16 half + d
    q = q.view(full // 64, cols, 64).transpose(1, 2).reshape(full, cols)
    if full == rows:
        return q
    t = flat[full * cols // 2 :].view(cols, (rows - full) // 2)
    tail = torch.stack([t & 15, t >> 4], dim=2).view(cols, rows - full).T
    return torch.cat([q, tail])


def _int4pack_readable(packed: torch.Tensor, q: torch.Tensor) -> bool:
    """Whether `unpack_int4pack` reads this packing back to `q` (it depends on aten's build and CPU)."""
    rows, cols = q.shape
    if rows % 16 or packed.dtype != torch.uint8 or packed.numel() * 2 != rows * cols:
        return False
    return torch.equal(unpack_int4pack(packed, rows, cols).to(q.dtype), q)


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
        self.rows, self.cols = weight.rows, weight.cols
        # inputs of more rows widen the packed weight per call (see `wide_rows`), where aten's packing is the
        # one `unpack_int4pack` reads (checked here on this very weight)
        self.wide_rows = wide_rows("INT4", dtype) if _int4pack_readable(self.packed, q) else None
        self.name = (
            "aten int4 pack-mm"
            + (" (act-order)" if self.perm is not None else "")
            + (f", widened per call above {self.wide_rows} rows" if self.wide_rows is not None else "")
        )

    def widened(self) -> torch.Tensor:
        """The weight [rows, cols] (act-order: its permuted columns) in the activation dtype, from the packed
        nibbles: (q - 8) * s + (8 - z) * s per group. A temporary."""
        groups = self.cols // self.group
        s = self.scales_zeros[..., 0].T.reshape(self.rows, groups, 1)
        z = self.scales_zeros[..., 1].T.reshape(self.rows, groups, 1)
        q = unpack_int4pack(self.packed, self.rows, self.cols).view(self.rows, groups, self.group)
        return q.to(self.dtype).sub_(8).mul_(s).add_(z).view(self.rows, self.cols)

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.perm is not None:
            x = x.index_select(-1, self.perm)
        if self.wide_rows is not None and x.shape[0] > self.wide_rows and x.dtype == self.dtype:
            return F.linear(x, self.widened(), bias)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x.contiguous(), self.packed, self.group, self.scales_zeros
        )
        return y if bias is None else y + bias

    def release_source(self) -> bool:
        return True


class Int8PackKernel(QuantizedLinearKernel):
    """Symmetric int8 weights with one scale per row on `aten._weight_int8pack_mm`."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> None:
        self.weight = weight.contiguous()  # int8 [rows, cols]
        self.scale = scale.to(dtype).contiguous()  # [rows]
        self.dtype = dtype
        self.wide_rows = wide_rows("INT8", dtype)
        self.name = f"aten int8 weight-only mm, widened per call above {self.wide_rows} rows"

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.shape[0] > self.wide_rows and x.dtype == self.dtype:
            # the integers are exact in bfloat16: a temporary of them, the dense product, the scales after
            y = F.linear(x, self.weight.to(self.dtype)).mul_(self.scale)
            return y if bias is None else y.add_(bias)
        y = torch.ops.aten._weight_int8pack_mm(x.contiguous(), self.weight, self.scale)
        return y if bias is None else y + bias


class DequantizePerCallKernel(QuantizedLinearKernel):
    """Grouped GPTQ int8 (per-group scales and zero points): one byte per weight kept, int8 values
    (q - 128); each call dequantizes into a temporary of the activation dtype and multiplies."""

    name = "int8 dequantized per call"

    def __init__(self, weight: GPTQWeight, dtype: torch.dtype) -> None:
        self.dtype = dtype
        g = weight.group_index()
        self.values = (weight.int_weight() - 128).to(torch.int8)
        self.scale = weight.scales.to(dtype)[g].T.contiguous()  # [rows, cols]
        self.zero = (weight.zero_points() - 128).to(dtype)[g].T.contiguous()

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        w = self.values.to(self.dtype) - self.zero
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


def _refuse_nan(weight: FP8Weight) -> None:
    if nans := weight.nan_codes():
        raise UnsupportedError(f"float8_e4m3fn weights holding NaN cannot be computed ({nans} NaN codes)")


class FP8BitsKernel(QuantizedLinearKernel):
    """float8_e4m3fn weights kept as their bytes; each call widens them to bfloat16 with integer ops
    (sign | (exponent-and-mantissa << 4) + 120 << 7: exact for normal numbers) and multiplies, then applies
    the row scales to the output. Subnormal codes and zeros (exponent 0), which that formula gets wrong,
    are corrected by a gather and an index_add of their differences (78 of 885k weights in a
    [1536, 576] Gaussian weight scaled per row). torch's own float8 -> bfloat16 conversion takes ~10 ms for a [1536, 576] weight on this CPU,
    this ~0.3 ms (bfloat16's product alone: 0.06 ms; `torch._scaled_mm` on the CPU: ~8 ms)."""

    name = "float8 widened per call by integer ops (CPU)"

    def __init__(self, weight: FP8Weight, dtype: torch.dtype) -> None:
        _refuse_nan(weight)
        codes = weight.weight.view(torch.int8)
        em = codes.to(torch.int16) & 0x7F
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


class FP8NativeKernel(QuantizedLinearKernel):
    """float8_e4m3fn weights on the native float8 linear (`tgi.backends.cpu.native.fp8_linear`: the bytes
    repacked once into groups of 16 rows, one byte per weight, widened exactly in registers; AVX512-BF16 for
    bfloat16 activations, AVX2 float32 otherwise), the row scales applied to the float32 sums. On the float32
    paths, inputs of more than `WIDE_ROWS` rows widen the weight once per call (natively) into a temporary of
    the activation dtype, freed after the call, and take the dense product, the row scales on its output
    (the AVX512-BF16 path keeps up with the dense product at every row count measured: never widened).
    NaN codes (0x7f, 0xff) are refused: a checkpoint holding them has no defined product."""

    def __init__(self, weight: FP8Weight, dtype: torch.dtype) -> None:
        from tgi.backends.cpu import native

        _refuse_nan(weight)
        self._native = native
        self.rows, self.cols = weight.rows, weight.cols
        self.packed = native.fp8_pack(weight.weight.cpu())
        self.scale = weight.scale.float().contiguous()
        self.dtype = dtype
        self.impl = os.environ.get("TGI_CPU_FP8_IMPL", "auto")
        impls = native.fp8_impls()
        vector = (
            "avx512-bf16"
            if dtype == torch.bfloat16 and "avx512-bf16" in impls
            else ("avx2" if "avx2" in impls else "reference")
        )
        path = vector if self.impl == "auto" else self.impl
        # the float32 paths (AVX2, reference) as measured in float32; AVX512-BF16 as in bfloat16
        self.wide_rows = wide_rows("FP8", torch.bfloat16 if path == "avx512-bf16" else torch.float32)
        self.name = f"cpu-native float8 linear ({path}" + (
            ", every row count)"
            if self.wide_rows is None
            else f" up to {self.wide_rows} rows, widened above)"
        )

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.wide_rows is not None and x.shape[0] > self.wide_rows:
            w = self._native.fp8_widen(self.packed, self.rows, self.cols, x.dtype)
            y = F.linear(x, w).mul_(self.scale.to(x.dtype))
            return y if bias is None else y.add_(bias)
        return self._native.fp8_linear(x, self.packed, self.scale, self.rows, self.cols, bias, impl=self.impl)

    def release_source(self) -> bool:
        return True


def fp8_kernel_kind() -> str:
    """Which float8 kernel the CPU backend makes: "native" (the native float8 linear, where the native
    kernels build and `TGI_CPU_FP8_NATIVE` is not 0) or "torch-ops" (`FP8BitsKernel`)."""
    from tgi.backends.cpu import native

    if os.environ.get("TGI_CPU_FP8_NATIVE", "1") != "0" and native.available():
        return "native"
    return "torch-ops"


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
        return FP8NativeKernel(weight, act) if fp8_kernel_kind() == "native" else FP8BitsKernel(weight, act)
    if weight.format.startswith("bnb-"):
        return BnbKernel(weight, act)
    raise UnsupportedError(f"the CPU backend has no kernel for {weight.format} weights")
