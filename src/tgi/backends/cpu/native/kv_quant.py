"""The native kernels of the quantized KV cache (`native/kv_quant*.cpp`, in the one library `load()` builds): the
writer that quantizes tokens into the cache, and the paged decode attention that reads the codes and scales as
stored. `tgi.backends.cpu.kv_quant` is the torch reference both are held to."""

from __future__ import annotations

import torch

from tgi.backends.cpu.kv_quant import KINDS, QuantizedPart
from tgi.backends.cpu.native.loader import load

#: implementations of `paged_decode_quantized`
QUANT_DECODE_IMPLS = {"auto": 0, "reference": 1, "avx2": 2, "avx512": 3, "amx": 4}


def kv_decode_impls() -> list[str]:
    """The `paged_decode_quantized` implementations this CPU has: "reference" (plain loops), "avx2" (with FMA
    and F16C), "avx512" (AVX-512F), "amx" (AMX-BF16 granted by the OS, with AVX512-BF16)."""
    return list(load().kv_decode_impls())


def kv_write_quantized(
    keys: QuantizedPart,
    values: QuantizedPart,
    key: torch.Tensor,
    value: torch.Tensor,
    slots: torch.Tensor,
    k_scale: float | None = None,
    v_scale: float | None = None,
) -> None:
    """Quantize token i's `key` / `value` [T, Hkv, Dh] (float32 or bfloat16, each token's heads contiguous) into
    slot `slots[i]` of `keys` / `values` (negative: skipped), scales computed per token and kv head, or the
    checkpoint's `k_scale` / `v_scale` for every token (float8 only). The bytes `kv_quant.quantize` makes."""
    load().kv_write_quantized(
        keys.codes.view(torch.uint8),
        values.codes.view(torch.uint8),
        keys.scales,
        values.scales,
        key,
        value,
        slots,
        KINDS[keys.kv_dtype],
        float(k_scale or 0.0),
        float(v_scale or 0.0),
    )


def paged_decode_quantized(
    q: torch.Tensor,
    keys: QuantizedPart,
    values: QuantizedPart,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """`paged_decode` (see `tgi.backends.cpu.native`) over a quantized cache: q [D, H, Dh] float32 or bfloat16 ->
    [D, H, Dh] in q's dtype, the keys and values read as codes and scales. Scores, softmax and sums in float32:
    each score is the query's dot product with the key's widened codes times the key's scale, each probability
    takes its value's scale before the weighted sum of the widened value codes. `impl`: "auto" (AVX-512, else
    AVX2, for the head sizes they have: 32, 64, 80, 96, 128, 256; else AMX where the shapes allow; else
    "reference"), or one of `kv_decode_impls()`, which raises where it cannot run: "amx" takes bfloat16 queries,
    head size 32, 64, 96 or 128, a block size that is a multiple of 16, at most 16 query heads per kv head (it
    widens the keys' codes into bfloat16 tiles: slower than "avx512" here, kept for the comparison)."""
    if keys.kv_dtype != values.kv_dtype:
        raise ValueError(f"keys stored as {keys.kv_dtype}, values as {values.kv_dtype}")
    return load().paged_decode_quantized(
        q,
        keys.codes.view(torch.uint8),
        values.codes.view(torch.uint8),
        keys.scales,
        values.scales,
        block_tables,
        seq_lens,
        float(scale),
        -1 if sliding_window is None else int(sliding_window),
        0.0 if softcap is None else float(softcap),
        KINDS[keys.kv_dtype],
        QUANT_DECODE_IMPLS[impl],
    )


def paged_prefill_quantized(
    q: torch.Tensor,
    keys: QuantizedPart,
    values: QuantizedPart,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """`paged_prefill` (see `tgi.backends.cpu.native`: bfloat16 queries, AVX512-BF16) over a quantized cache: each
    tile's codes widened to bfloat16 exactly, the keys' scales multiplying the scores, the values' the
    probabilities before they round to bfloat16."""
    return load().paged_prefill_quantized(
        q,
        keys.codes.view(torch.uint8),
        values.codes.view(torch.uint8),
        keys.scales,
        values.scales,
        block_tables,
        query_start_loc,
        seq_lens,
        float(scale),
        -1 if sliding_window is None else int(sliding_window),
        0.0 if softcap is None else float(softcap),
        KINDS[keys.kv_dtype],
    )
