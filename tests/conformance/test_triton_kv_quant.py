"""The Triton kernels over a quantized KV cache (`kernels.kv_quant`), run by Triton's interpreter on CPU tensors:
the write stores the bytes of the CPU backend's reference quantizer; the split-K decode, the chunked prefill and
the batch-invariant prefill, reading the same codes and scales, give the CPU backend's SDPA reference (which
dequantizes them) in float32. The whole backend through the conformance suite over these caches:
test_triton_interpret.py (`test_quantized_kv_cache_is_close_or_refused`, `test_attention_quantized_kv`)."""

from __future__ import annotations

import os

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("a GPU is visible: the kernels run natively there", allow_module_level=True)
os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

from tgi.backends.cpu.attention import CpuAttention
from tgi.backends.cpu.kv_quant import CODE_DTYPES
from tgi.backends.cpu.quantized_kv_cache import QuantizedCpuKVCache
from tgi.backends.triton_common import kernels as tk
from tgi.backends.triton_common.kernels.invariant_prefill import prefill_as_decode_rows
from tgi.backends.triton_common.kernels.kv_quant import KV_KINDS, quantize_into_cache
from tgi.core.interfaces import AttentionLayerSpec, KVCacheSpec
from tgi.core.models.context import SeqChunk, build_attention_metadata

KV_DTYPES = list(CODE_DTYPES)
TOL = 2e-5  # float32 outputs over the same stored values (the CPU reference dequantizes, Triton too)


@pytest.mark.parametrize("kv", KV_DTYPES)
def test_the_write_stores_the_cpu_reference_s_bytes(kv):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(70, 3, 24, generator=gen) * 3  # odd head count and head size: padded in the kernel
    x[5, 1] = 0
    slots = torch.randperm(96, generator=gen)[:70]
    slots[[3, 9]] = -1
    for fixed in (None,) if kv == "int8" else (None, 0.01):
        spec = KVCacheSpec(1, 3, 24, 8, "float32", kv, () if fixed is None else ((fixed, fixed),))
        ref = QuantizedCpuKVCache(spec, 12)
        ref.write(0, x, x, slots)
        codes = torch.zeros(12, 8, 3, 24, dtype=torch.uint8)
        scales = torch.zeros(12, 8, 3)
        quantize_into_cache(x, codes, scales, slots, kv, fixed)
        keys, _ = ref.layer(0)
        assert torch.equal(codes, keys.codes.view(torch.uint8)) and torch.equal(scales, keys.scales)


def _cache(kv, hkv, d, bs, lens, seed):
    """A quantized CPU cache holding one sequence per length on scattered blocks, and their block tables."""
    gen = torch.Generator().manual_seed(seed)
    need = [-(-n // bs) for n in lens]
    cache = QuantizedCpuKVCache(KVCacheSpec(1, hkv, d, bs, "float32", kv), sum(need) + 2)
    n = cache.num_blocks * bs
    cache.write(
        0, torch.randn(n, hkv, d, generator=gen) * 2, torch.randn(n, hkv, d, generator=gen), torch.arange(n)
    )
    perm = torch.randperm(cache.num_blocks, generator=gen).tolist()
    tables, off = [], 0
    for k in need:
        tables.append(perm[off : off + k])
        off += k
    keys, values = cache.layer(0)
    quant = {"kv_scales": (keys.scales, values.scales), "kv_kind": KV_KINDS[kv]}
    return cache, tables, keys.codes.view(torch.uint8), values.codes.view(torch.uint8), quant


@pytest.mark.parametrize("kv", KV_DTYPES)
@pytest.mark.parametrize(("window", "cap", "splits"), [(None, None, 1), (13, 2.5, 3)])
def test_decode_reads_the_codes_and_scales(kv, window, cap, splits):
    layer = AttentionLayerSpec(8, 2, 32, 32**-0.5, window, cap)
    lens = [1, 37, 70]
    cache, tables, kc, vc, quant = _cache(kv, 2, 32, 4, lens, seed=1)
    meta = build_attention_metadata(
        [SeqChunk(n - 1, 1, t, False) for n, t in zip(lens, tables, strict=True)], 4
    )
    q = torch.randn(len(lens), 8, 32, generator=torch.Generator().manual_seed(2)) * 2
    expected = CpuAttention().decode(q, cache, 0, meta, layer)
    out = tk.paged_decode_attention(
        q, kc, vc, meta.decode_block_tables, meta.decode_seq_lens, layer.scale, num_splits=splits,
        sliding_window=window, softcap=cap, block_n=16, **quant,
    )  # fmt: skip
    assert (out - expected).abs().max().item() <= TOL


@pytest.mark.parametrize("kv", KV_DTYPES)
@pytest.mark.parametrize("invariant", [False, True], ids=["tiled", "as-decode-rows"])
def test_prefill_reads_the_codes_and_scales(kv, invariant):
    layer = AttentionLayerSpec(6, 2, 32, 32**-0.5, 9, None)
    chunks = [(0, 21), (30, 9), (5, 1)]
    lens = [a + n for a, n in chunks]
    cache, tables, kc, vc, quant = _cache(kv, 2, 32, 4, lens, seed=3)
    meta = build_attention_metadata([SeqChunk(a, n, t) for (a, n), t in zip(chunks, tables, strict=True)], 4)
    q = torch.randn(meta.num_prefill_tokens, 6, 32, generator=torch.Generator().manual_seed(4)) * 2
    expected = CpuAttention().prefill(q, q[:, :2], q[:, :2], cache, 0, meta, layer)  # (reads the cache)
    args = (q, kc, vc, meta.prefill_block_tables, meta.query_start_loc, meta.prefill_seq_lens)
    if invariant:
        out = prefill_as_decode_rows(*args, layer.scale, layer.sliding_window, None, block_n=16, **quant)
    else:
        out = tk.paged_prefill_attention(
            *args,
            meta.max_query_len,
            layer.scale,
            layer.sliding_window,
            None,
            block_rows=32,
            block_n=16,
            **quant,
        )
    assert (out - expected).abs().max().item() <= TOL
