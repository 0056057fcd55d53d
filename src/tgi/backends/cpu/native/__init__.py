"""Native (C++) CPU kernels, compiled at first use with `torch.utils.cpp_extension.load` from the C++ files
next to this module (package data): the paged decode attention, the linear over GGUF block-quantized weights
and fused elementwise ops, in one library; the quantized KV cache's writer and attention are wrapped by
`native.kv_quant`. `bindings.cpp` makes the Python module of the ops in `ops.h` and the other headers.

The build needs a C++ compiler (g++) and ninja (a dependency of tgi); it is cached in a folder named by the
sources' content (`build`: under `$TGI_CACHE_DIR/torch_extensions`, `$TORCH_EXTENSIONS_DIR` or torch's
default), so every clone of the same sources on a machine loads the same library. The first build takes
minutes on 2 cores; later processes load the cached library.
`make install` and the CPU image build it ahead (`python -m tgi.backends.cpu.native build`); where nothing
was built, the first process builds it here (and says so in the log). Loads and builds take a kernel lock
on the build folder (`build_lock`), so that a process killed inside one never leaves the others waiting.

A failed build is not retried in the same process: `load()` raises `NativeBuildError` again with the
compiler's reason.
"""

from __future__ import annotations

import torch

from tgi.backends.cpu.native.loader import NativeBuildError, available, compiler_found, load

__all__ = [
    "BLOCK_TYPES",
    "DECODE_IMPLS",
    "DEQUANTIZE_IMPLS",
    "NativeBuildError",
    "available",
    "block_dequantize",
    "block_impls",
    "block_linear",
    "block_pack",
    "compiler_found",
    "dequantize_impls",
    "fp8_impls",
    "fp8_linear",
    "fp8_pack",
    "fp8_widen",
    "fused",
    "load",
    "lora_impls",
    "lora_sgmv",
    "paged_decode",
    "paged_prefill",
    "prefill_supported",
]


def paged_decode(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Decode attention straight through the block table.

    q [D, H, Dh] (float32 or bfloat16), key_cache/value_cache [num_blocks, block_size, Hkv, Dh] (q's dtype),
    block_tables [D, max_blocks] int32, seq_lens [D] int32 (keys per sequence, the new one included)
    -> [D, H, Dh]. Scores and softmax in float32; `sliding_window` keeps the last that many keys,
    `softcap` applies `softcap * tanh(score / softcap)`.

    `impl`: "auto" (AMX where the CPU has it and the shapes allow: bfloat16, head size 32, 64, 96 or 128,
    block size a multiple of 16, at most 16 query heads per kv head; else "vector"), "vector" (AVX-512 or
    scalar) or "amx" (the scores on AMX tiles, 16 keys at a time straight from the cache; softmax and the
    value product as on the vector path, in float32; raises where it cannot run).
    """
    return load().paged_decode(
        q,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        float(scale),
        -1 if sliding_window is None else int(sliding_window),
        0.0 if softcap is None else float(softcap),
        DECODE_IMPLS[impl],
    )


#: implementations of `paged_decode`
DECODE_IMPLS = {"auto": 0, "vector": 1, "amx": 2}


def prefill_supported(dtype: torch.dtype, head_size: int) -> bool:
    """Whether `paged_prefill` runs here for these queries: bfloat16, a head size that is a multiple of 32 up
    to 256, a CPU with AVX512-BF16 (the kernel's only path)."""
    return (
        dtype == torch.bfloat16
        and head_size % 32 == 0
        and 0 < head_size <= 256
        and bool(load().paged_prefill_available())
    )


def paged_prefill(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Prefill attention straight through the block tables, for chunks whose keys/values are in the cache
    already (the cached context and the chunk's own).

    q [T, H, Dh] bfloat16 (chunk p's queries are rows query_start_loc[p] .. query_start_loc[p + 1]),
    key_cache/value_cache [num_blocks, block_size, Hkv, Dh] bfloat16, block_tables [P, max_blocks] int32,
    query_start_loc [P + 1] int32, seq_lens [P] int32 (each sequence's tokens up to its chunk's end, as
    `paged_decode` takes them; the chunk starts at seq_lens[p] - its length) -> [T, H, Dh]. The chunk's i-th
    query, at position seq_lens[p] - (its length) + i, sees the keys at positions up to its own (causal), the last
    `sliding_window` of them when given; `softcap` applies `softcap * tanh(score / softcap)`. Scores, softmax
    and sums in float32; the probabilities are rounded to bfloat16 for the value product (as torch's CPU
    flash attention does for bfloat16). Raises where `prefill_supported` is false."""
    return load().paged_prefill(
        q,
        key_cache,
        value_cache,
        block_tables,
        query_start_loc,
        seq_lens,
        float(scale),
        -1 if sliding_window is None else int(sliding_window),
        0.0 if softcap is None else float(softcap),
    )


#: GGUF block formats the block kernels take, by their llama.cpp names: blocks of 32 weights, and the
#: K-quants' super-blocks of 256 (their weights need K a multiple of 256). AMX: Q4_0, Q4_1, Q8_0
#: (docs/backends/cpu.md)
BLOCK_TYPES = {"Q4_0": 0, "Q4_1": 1, "Q8_0": 2, "Q5_0": 6, "Q5_1": 7, "Q4_K": 3, "Q5_K": 4, "Q6_K": 5}
#: implementations of `block_linear`
BLOCK_IMPLS = {"auto": 0, "reference": 1, "avx512-bf16": 2, "amx": 3, "avx512-vnni": 4, "avx2-int8": 5}


#: how `block_pack` stores the high bits of Q5_K and Q6_K (native/block_linear_kquant.h): "masks" (lane
#: masks, which every implementation reads) or "fields" (which the AVX2 int8 path sets in place with a shift
#: and a mask per 32 weights; "avx512-bf16" and "avx512-vnni" refuse it, "auto" takes "reference" there)
KQUANT_LAYOUTS = ("masks", "fields")
#: the native type ids of Q5_K and Q6_K packed with fields
_FIELDS_TYPES = {"Q5_K": 8, "Q6_K": 9}


def _packed_type(qtype: str, layout: str) -> int:
    if layout not in KQUANT_LAYOUTS:
        raise ValueError(f"unknown packed layout {layout!r} (known: {', '.join(KQUANT_LAYOUTS)})")
    if layout == "masks":
        return BLOCK_TYPES[qtype]
    if qtype not in _FIELDS_TYPES:
        raise ValueError(f"{qtype} has no high bits to pack as fields (Q5_K and Q6_K have)")
    return _FIELDS_TYPES[qtype]


def preferred_layout(qtype: str) -> str:
    """The layout `block_pack` should use for `qtype` on this CPU: "fields" for Q5_K and Q6_K where it has no
    AVX512-BF16 (no kernel that reads only lane masks runs here, and the AVX2 int8 path reads fields ~2x
    faster), else "masks"."""
    if qtype in _FIELDS_TYPES and "avx512-bf16" not in block_impls():
        return "fields"
    return "masks"


def block_pack(raw: torch.Tensor, qtype: str, n: int, k: int, layout: str = "masks") -> torch.Tensor:
    """Repack a [n, k] weight's GGUF blocks (uint8 [n, k / 32 * block bytes], llama.cpp's layout; K-quants
    [n, k / 256 * super-block bytes]) into the layout `block_linear` reads (groups of 16 rows; the same size,
    K-quants 1-3 % more: their 6-bit scales unpacked to bytes), the high bits of Q5_K and Q6_K as `layout`
    (`KQUANT_LAYOUTS`; pass the same to `block_linear`). Returns a flat uint8 tensor."""
    return load().block_pack(raw, _packed_type(qtype, layout), int(n), int(k))


#: implementations of `block_dequantize`: "auto" takes "avx512" where the CPU has AVX-512 F and BW
DEQUANTIZE_IMPLS = {"auto": 0, "reference": 1, "avx512": 2}


def block_dequantize(
    raw: torch.Tensor, qtype: str, n: int, k: int, dtype: torch.dtype, impl: str = "auto"
) -> torch.Tensor:
    """The dense [n, k] weight of GGUF blocks in llama.cpp's layout (uint8 [n, k / 32 * block bytes];
    K-quants [n, k / 256 * super-block bytes]) in `dtype` (float32 or bfloat16): the float32 values of
    `gguf.quants.dequantize` bit for bit (bfloat16: those rounded to nearest even), in one native pass, by
    `impl` (one of `dequantize_impls()`, or "auto")."""
    if dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"block_dequantize makes bfloat16 or float32 weights, not {dtype}")
    if impl not in DEQUANTIZE_IMPLS:
        raise ValueError(
            f"unknown dequantization implementation {impl!r} (known: {sorted(DEQUANTIZE_IMPLS)})"
        )
    return load().block_dequantize(
        raw, BLOCK_TYPES[qtype], int(n), int(k), dtype == torch.bfloat16, DEQUANTIZE_IMPLS[impl]
    )


def dequantize_impls() -> list[str]:
    """The `block_dequantize` implementations this CPU offers: "reference", and "avx512" with AVX-512 F+BW."""
    return list(load().dequantize_impls())


def block_impls() -> list[str]:
    """The `block_linear` implementations this CPU (and OS) offers: "reference", "avx512-bf16", "amx",
    "avx512-vnni" (the K-quants on int8 inputs; with AVX512-VNNI, VBMI and BF16), "avx2-int8" (the
    K-quants, Q4_0, Q4_1 and Q8_0 on int8 inputs; with AVX2, FMA and F16C)."""
    return list(load().block_impls())


def block_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    qtype: str,
    n: int,
    k: int,
    bias: torch.Tensor | None = None,
    impl: str = "auto",
    layout: str = "masks",
) -> torch.Tensor:
    """`x @ W.T (+ bias)` with W [n, k] given as `block_pack(..., layout)` of its GGUF blocks.

    x [M, k] bfloat16 -> [M, n] bfloat16. Products of x with the exact weight values (not rounded to bfloat16)
    accumulate in float32, then round once. `impl`: "auto" (the fastest this CPU has), "amx" (weights
    dequantized to bfloat16 tiles, as the dense weights are, multiplied on AMX), "avx512-bf16", "avx512-vnni"
    (K-quants only: x quantized to int8 per row and 32 columns, integer products, as llama.cpp's q8_K with a
    scale per sub-block instead of per 256 columns; each output off the exact-input product by at most half an
    input step per column, summed over |w|), or "reference" (scalar; what a CPU without AVX512-BF16 takes).
    Raises for one this CPU lacks, "amx" for Q5_0, Q5_1 and the K-quants, "avx512-vnni" for any other type.
    "auto" computes the K-quants on "avx512-vnni" where the CPU has it, else on "avx512-bf16" (also on CPUs
    with AMX).
    float32 x -> float32 out ("auto" or "reference": AVX2 or plain loops; the K-quants' float32 path is one
    loop nest compiled for AVX-512, AVX2 and plain x86-64, "reference" takes it, and "auto" where the CPU
    has AVX512-VNNI or lacks AVX2). "avx2-int8" (K-quants, Q4_0, Q4_1, Q8_0; float32 or bfloat16 x): the
    K-quants on int8 inputs scaled per 256 columns (llama.cpp's q8_K) multiplied with AVX2's `vpmaddubsw`;
    Q4_0, Q4_1 and Q8_0 on x quantized per row and 32 columns (llama.cpp's q8_0 / q8_1, scales in float32), each
    output off the exact-input product by at most half an input step per column, summed over |w|; "auto"
    takes it for float32 x where the CPU has AVX2, FMA and F16C and no AVX512-VNNI (Q5_0, Q5_1 keep the
    float32 AVX2 kernel).
    """
    return load().block_linear(
        x, packed, _packed_type(qtype, layout), int(n), int(k), bias, BLOCK_IMPLS[impl]
    )


def fused():
    """The fused elementwise ops: `rms_norm(x, residual | None, weight, eps) -> (out, x + residual)`,
    `rotary_inplace(qkv, cos, sin, heads, head_dim)` (rotates the first `heads` heads of each row, q then k,
    in place; cos/sin [T, head_dim / 2]) and `silu_mul(gate_up) -> silu(gate) * up`; float32 or bfloat16,
    contiguous inputs. Also `kv_write(key_cache, value_cache, key, value, slots)`: token i's heads to slot
    `slots[i]` of [blocks, block_size, Hkv, Dh] caches, negative slots skipped (padding). And
    `greedy_pick(logits [N, V]) -> (ids [N] int64, logprobs [N] float32)`: each row's argmax (first maximum;
    a NaN wins, as in `torch.argmax`) and its log-softmax, with no float32 copy of the logits."""
    return load()


def release_openmp_threads() -> bool:
    """Free the OpenMP worker threads that the calling thread's parallel regions made (its pool; they are
    made again if it runs one later). For the thread that loaded a model before another thread steps it:
    libgomp counts every thread it manages, idle pools included, and where they outnumber the CPUs it
    barely spins at a barrier before sleeping, so that every parallel region of the stepping thread ends in
    a sleep and wake-up of each worker. False where it could not (inside a parallel region)."""
    return bool(load().release_openmp_threads())


#: implementations of `lora_sgmv`
LORA_IMPLS = {"auto": 0, "reference": 1, "avx512-bf16": 2, "avx2": 3}


def lora_impls() -> list[str]:
    """The `lora_sgmv` implementations this CPU offers: "reference", "avx512-bf16", "avx2"."""
    return list(load().lora_impls())


def lora_sgmv(
    y: torch.Tensor,
    x: torch.Tensor,
    a: torch.Tensor,
    bt: torch.Tensor,
    cols: torch.Tensor,
    slots: torch.Tensor,
    impl: str = "auto",
) -> torch.Tensor:
    """LoRA's segmented pair, in place: `y[t] += (x[t] @ a[s].T) @ bt[s]` for every token t with an adapter,
    s = slots[t] (int32 [T], -1: none; rows of y past T are left alone).

    x [>= T, in], y [>= T, out], a [S, R, in], bt [S, R, out] (B transposed, scaling applied), one dtype
    (bfloat16 or float32), rows contiguous; cols int32 [S, R, 2]: the columns [lo, hi) outside which row r of
    bt[s] is zero (a fused linear's part; empty for zero-padded ranks), which the fast paths skip. The
    shrink rounds to the dtype, the expand adds in float32 and rounds once. `impl`: "auto", "reference"
    (scalar, any dtype), "avx512-bf16" (bfloat16) or "avx2" (float32); raises for one this CPU lacks.
    Returns y."""
    return load().lora_sgmv(y, x, a, bt, cols, slots, LORA_IMPLS[impl])


#: implementations of `fp8_linear`
FP8_IMPLS = {"auto": 0, "reference": 1, "avx512-bf16": 2, "avx2": 3}


def fp8_impls() -> list[str]:
    """The `fp8_linear` implementations this CPU offers: "reference", "avx512-bf16", "avx2"."""
    return list(load().fp8_impls())


def fp8_pack(codes: torch.Tensor) -> torch.Tensor:
    """Repack a float8_e4m3fn weight [n, k] (or its bytes, uint8) into the layout `fp8_linear` reads (groups
    of 16 rows, each row's pairs of columns side by side; n padded to 16 and k to even with zero codes: one
    byte per weight). Raises for a weight holding NaN codes (0x7f, 0xff). Returns a flat uint8 tensor."""
    n, k = codes.shape
    return load().fp8_pack(codes.view(torch.uint8), int(n), int(k))


def fp8_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    scale: torch.Tensor,
    n: int,
    k: int,
    bias: torch.Tensor | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """`x @ (W * scale[:, None]).T (+ bias)` with W [n, k] float8_e4m3fn given as `fp8_pack(W)` and `scale`
    float32 [n]: x [M, k] bfloat16 or float32 -> [M, n] in x's dtype. The weights' exact values multiply x,
    sums in float32, one rounding to x's dtype. `impl`: "auto" (bfloat16 x: "avx512-bf16" where the CPU has
    it; else "avx2"; else "reference"), "avx512-bf16" (bfloat16 x only), "avx2" (float32 products; bfloat16 x
    widened to float32 first) or "reference" (scalar); raises for one this CPU lacks."""
    return load().fp8_linear(x, packed, scale, int(n), int(k), bias, FP8_IMPLS[impl])


def fp8_widen(packed: torch.Tensor, n: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    """The float8 weight [n, k] of `fp8_pack(...)`, as its exact values (unscaled) in `dtype` (bfloat16 or
    float32): a temporary for large inputs' dense products."""
    if dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"fp8_widen widens to bfloat16 or float32, not {dtype}")
    return load().fp8_widen(packed, int(n), int(k), dtype == torch.bfloat16)
