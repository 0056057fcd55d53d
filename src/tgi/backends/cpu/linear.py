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


#: the GGUF formats of llama.cpp's K-quant super-blocks (256 weights)
K_QUANTS = frozenset({"Q4_K", "Q5_K", "Q6_K"})


def int8_f32_k_quants(impls: list[str]) -> bool:
    """Whether "auto" computes float32 inputs' K-quants on int8 inputs ("avx2-int8": AVX2 and no
    AVX512-VNNI here, as the native dispatch decides). Q4_0, Q4_1 and Q8_0 take the int8 path only when
    asked (`TGI_CPU_BLOCK_IMPL=avx2-int8`): "auto" keeps their exact-input product (`max_block_rows_f32`)."""
    return "avx2-int8" in impls and "avx512-vnni" not in impls


def max_block_rows_f32(
    impls: list[str] | None = None, qtype: str | None = None, flags: frozenset[str] | None = None
) -> int | None:
    """For float32 models (CPUs without bfloat16 arithmetic): inputs of at most this many rows use the
    float32 block kernel (AVX2; `TGI_CPU_BLOCK_ROWS` overrides): `F32_AVX2_ROWS` for 32-weight blocks where
    the CPU has no AVX-512, else 16. Measured before the kernel took 4 rows at a time, on the AMD EPYC, 2 cores, with
    the dense float32 weight still in cache (in the model it is not: 540 MB of float32 weights against
    85 MB of blocks): [M, 576] x [576, 1536] Q4_1 M=1 37 vs 51 us, M=4 79 vs 158, M=16 239 vs 246, M=64
    901 vs 711; the Q8_0 head [M, 576] x [576, 49152] M=1 1.0 vs 7.0 ms, M=16 7.6 vs 14.7.

    The K-quants on the int8 path ("avx2-int8", `int8_f32_k_quants`) up to 64 rows where the CPU has AVX-512,
    every row count where it has not (None, `K_INT8_AVX2_ROWS`): on the AMD EPYC family
    23 model 1 (Zen 1, AVX2 only), one thread, [M, 2048] x [2048, 8192] Q4_K against the dense float32
    product, medians of interleaved runs on a machine shared with other work: M=1 1.2 vs 4.2 ms, M=16 22 vs
    50, M=32 40 vs 74, M=64 85 vs 121 (docs/backends/cpu.md).

    Q4_0, Q4_1 and Q8_0 on the int8 path, when asked (`TGI_CPU_BLOCK_IMPL=avx2-int8`, up to 16 rows): same
    CPU, one thread, shared machine, medians of 7 interleaved runs, against the float32 AVX2 kernel and the
    dense float32 product: [M, 576] x [576, 1536] Q4_1 M=1 69 vs 337 vs 142 us, M=4 177 vs 620 vs 511, M=16
    717 vs 1865 vs 1210; the Q8_0 head [M, 576] x [576, 49152] M=1 2.7 vs 11.3 vs 10.2 ms, M=16 29.1 vs 57.4
    vs 54.5. Not "auto": int8 inputs move the default model's log-probabilities by up to ~0.3 (its greedy
    tokens agree with the exact product on 60 of 64 steps), past the float32 parity with transformers
    (1e-4) that "auto" keeps."""
    if os.environ.get("TGI_CPU_BLOCK_ROWS"):
        return int(os.environ["TGI_CPU_BLOCK_ROWS"])
    if qtype in K_QUANTS and impls is not None and int8_f32_k_quants(impls) and BLOCK_IMPL == "auto":
        return K_INT8_AVX2_ROWS if avx2_only(impls, flags) else 64
    if qtype not in K_QUANTS and BLOCK_IMPL == "auto" and impls is not None and avx2_only(impls, flags):
        return F32_AVX2_ROWS
    return 16


#: the K-quants' row limit on int8 inputs where the CPU has no AVX-512: none (every row count), as their integer
#: products beat the dense float32 product at every size measured, and the time of both grows with the rows
#: alike. AMD EPYC Zen 1, 2 threads, [M, 2048] x [2048, 8192] Q4_K against the dense float32 weight: M=64 29.5
#: vs 56.6 ms, M=128 56.2 vs 87.3, M=256 113 vs 151, M=512 232 vs 288, M=1024 514 vs 554, M=2048 1042 vs 1103.
#: With no limit the seam drops each layer's dense float32 copy: the 1B-class Q4_K_M file's engine holds 2.4
#: GB after start-up instead of 6.1 (a CPU with AVX-512 but no VNNI keeps 64 rows: its dense product is twice
#: as wide)
K_INT8_AVX2_ROWS: int | None = None

#: the float32 AVX2 kernel's row limit for 32-weight blocks on CPUs without AVX-512 (whose dense float32
#: product is AVX2 too): since it multiplies 4 input rows at a time it beats the dense product up to about
#: 256 rows. AMD EPYC Zen 1, [M, 576] x [576, 1536] Q4_1 against the dense float32 weight (kept in cache, so
#: the dense side's best case), 2 threads: M=16 562 vs 741 us, M=64 1770 vs 2138, M=256 7224 vs 8040, M=2048
#: 82978 vs 52674; one thread M=128 7077 vs 7283, M=512 29076 vs 25843
F32_AVX2_ROWS = 256


def avx2_only(impls: list[str], flags: frozenset[str] | None = None) -> bool:
    """Whether the float32 AVX2 block kernel runs here (its CPUs offer avx2-int8) and the CPU has no
    AVX-512 (whose dense float32 products are twice as wide: there the limits stay 16 and 64 rows).
    `flags`: the CPU's (default: this one's)."""
    if flags is None:
        from tgi.backends.cpu.cpuinfo import cpu_info

        flags = cpu_info().flags
    no_avx512 = not any(i.startswith("avx512") for i in impls) and "avx512f" not in flags
    return "avx2-int8" in impls and no_avx512


def block_rows(
    dtype: str, impls: list[str], qtype: str | None = None, flags: frozenset[str] | None = None
) -> int | None:
    """The most rows a block kernel takes for a model in `dtype` (see the two functions above; None: every
    row count, and the layer keeps no dense copy); `qtype`:
    the weight's GGUF format (None: the formats of 32-weight blocks); `flags`: the CPU's (default: this one's)."""
    if dtype == "float32":
        return max_block_rows_f32(impls, qtype, flags)
    if qtype in K_QUANTS and k_int8_every_row(impls):
        return None
    return max_block_rows(impls)


def k_int8_every_row(impls: list[str]) -> bool:
    """Whether bfloat16 models compute their K-quants on int8 inputs (AVX512-VNNI) for every row count, with
    no dense copy of those weights: where the CPU has VNNI and no AMX, "auto", no `TGI_CPU_BLOCK_ROWS`.

    Measured on an AMD EPYC Zen 4 (2 threads, medians of 5): the int8 product against oneDNN's dense bfloat16
    one, [M, 2048] x [2048, 8192] Q4_K M=128 7.9 vs 10.6 ms, M=512 37.8 vs 39.4; [M, 8192] x [8192, 2048]
    M=256 21.8 vs 20.7; Q6_K is slower above 64 rows (M=512 45.2 vs 40.8, the worst [M, 8192] x [8192, 2048]
    M=256 23.5 vs 20.2). A Q4_K_M file's K-quants are mostly Q4_K, and no dense bfloat16 copy of them is made:
    the 1B-class file's server holds 1.9 GB after start-up instead of 3.8, loads its weights in 1.7 s instead
    of 3.6, and served the peers workload side by side with the dense copy above 64 rows at C=1 30.3 vs 28.6
    tok/s (TTFT p50 1.03 vs 1.18 s), C=32 74.0 vs 73.5 (TTFT p50 20.9 vs 22.9 s). AMX CPUs keep the dense copy
    above 64 rows (their dense products are AMX tiles: not measured against the int8 path)."""
    if os.environ.get("TGI_CPU_BLOCK_ROWS") or BLOCK_IMPL != "auto":
        return False
    return "avx512-vnni" in impls and "amx" not in impls


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
    for the default model 85 MB of blocks beside 270 MB of bfloat16).

    `max_rows=None` with a fixed `impl` (batch-invariant mode, see `invariant_block_impl`): every row
    count on one implementation, and the dense copy is dropped."""

    def __init__(self, block, max_rows: int | None, impl: str = BLOCK_IMPL) -> None:
        from tgi.backends.cpu import native

        self.qtype, self.rows, self.cols = block.qtype, block.rows, block.cols
        self.layout = native.preferred_layout(block.qtype)
        self.packed = native.block_pack(block.data, block.qtype, block.rows, block.cols, self.layout)
        self.max_rows = max_rows
        self.impl = impl
        rows = "every row count" if max_rows is None else f"<= {max_rows} rows"
        self.name = f"cpu-native GGUF {block.qtype} block linear ({rows})"
        self._native = native

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return self._native.block_linear(
            x, self.packed, self.qtype, self.rows, self.cols, bias, impl=self.impl, layout=self.layout
        )

    def release_source(self) -> bool:
        return True  # the packed copy is the kernel's own


def invariant_block_impl(qtype: str, dtype: str) -> str:
    """The block kernel's one implementation for every row count in batch-invariant mode: each computes a
    row's sums in an order fixed by the weight's shape alone (its threads split the output columns, never
    a row's sum), but "auto" switches between AVX512-BF16 (one or two rows) and AMX (more) on AMX CPUs.
    Here: `TGI_CPU_BLOCK_IMPL` when set; else for bfloat16 AMX where it takes the type (Q4_0, Q4_1, Q8_0),
    else AVX512-BF16, else the scalar reference; float32 inputs: "auto" (by the CPU's features, never by
    the row count), except the K-quants where "auto" would take the int8 path ("avx2-int8"): they keep the
    float32 loop nest ("reference" names it), the exact-input product."""
    from tgi.backends.cpu import native

    forced = os.environ.get("TGI_CPU_BLOCK_IMPL", "auto")
    if forced != "auto":
        return forced
    impls = native.block_impls()
    if dtype == "float32":
        return "reference" if qtype in K_QUANTS and int8_f32_k_quants(impls) else "auto"
    if "amx" in impls and qtype in ("Q4_0", "Q4_1", "Q8_0"):
        return "amx"
    return "avx512-bf16" if "avx512-bf16" in impls else "reference"


def one_row_at_a_time(product, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`product(x, bias)` computed one row at a time, each row copied to a fresh (64-byte aligned) tensor:
    every row is then the same call on the same shape and alignment, whatever the batch, so its result
    cannot depend on the rows beside it (torch's GEMMs pick their kernel and blocking by the row count)."""
    if x.dim() != 2 or x.shape[0] <= 1:
        if x.dim() == 2:
            return product(x.contiguous(), bias)
        return one_row_at_a_time(product, x.reshape(-1, x.shape[-1]), bias).view(*x.shape[:-1], -1)
    return torch.cat([product(x[i : i + 1].clone(), bias) for i in range(x.shape[0])])


class RowAtATimeLinear:
    """A `linear_kernel` for a dense weight in batch-invariant mode (`one_row_at_a_time` over `F.linear`).
    Slow for many rows: every row reads the whole weight (GGUF checkpoints take the block kernel instead)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return one_row_at_a_time(lambda r, b: F.linear(r, self.weight, b), x, bias)


class RowAtATimeKernel(QuantizedLinearKernel):
    """A quantized kernel in batch-invariant mode: `kernel` one row at a time (`one_row_at_a_time`), so
    that every row count is its one-row product (its `max_rows` is then no limit)."""

    def __init__(self, kernel: QuantizedLinearKernel) -> None:
        self.kernel = kernel
        self.max_rows = None
        self.name = f"{kernel.name}, one row at a time"

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return one_row_at_a_time(self.kernel, x, bias)

    def release_source(self) -> bool:
        return self.kernel.release_source()


def attach_row_at_a_time(model: torch.nn.Module) -> int:
    """Batch-invariant mode: every linear with a dense weight computes one row at a time
    (`RowAtATimeLinear`); those with a quantized weight get their kernel from the seam afterwards.
    Returns how many."""
    count = 0
    for module in model.modules():
        if "linear_kernel" in dir(type(module)) and not module.weight.is_meta:
            module.linear_kernel = RowAtATimeLinear(module.weight)
            count += 1
    return count


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
