"""Attention over the quantized KV cache: the native decode on every path this CPU has (the reference loops,
AVX2, AVX-512, AMX, each forced by name), the native prefill (AVX512-BF16) and the SDPA reference, against
dense float64 attention over the values the cache holds (codes times scales), on scattered blocks, ragged
lengths, GQA, windows and soft-caps. (The engine on each KV dtype: the conformance suite's check.)"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

from tgi.backends.cpu import native
from tgi.backends.cpu.attention import CpuAttention, CpuNativeAttention
from tgi.backends.cpu.kv_quant import CODE_DTYPES, dequantize
from tgi.backends.cpu.quantized_kv_cache import QuantizedCpuKVCache
from tgi.core.interfaces import AttentionLayerSpec, KVCacheSpec
from tgi.core.models.context import SeqChunk, build_attention_metadata
from tgi.core.torch.testing.reference import dense_attention

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)
KV_DTYPES = list(CODE_DTYPES)
IMPLS = ["reference", "avx2", "avx512", "amx"]


def quant_impls():
    from tgi.backends.cpu.native.kv_quant import kv_decode_impls

    return kv_decode_impls()


def cached_values(cache, table, n):
    """The keys and values [n, Hkv, Dh] float64 the cache holds for a sequence of `n` tokens on `table`."""
    bs = cache.spec.block_size
    slots = torch.tensor([table[t // bs] * bs + t % bs for t in range(n)])
    h, d = cache.spec.num_kv_heads, cache.spec.head_dim
    return [
        dequantize(p.codes.view(-1, h, d)[slots], p.scales.view(-1, h)[slots], torch.float64)
        for p in cache.layer(0)
    ]


def make_batch(layer, kv, lengths, block_size=16, dtype=torch.bfloat16, seed=0):
    """A quantized cache holding one sequence per length on scattered blocks; the decode metadata and queries
    of each sequence's last token, and the dense reference of each."""
    gen = torch.Generator().manual_seed(seed)
    h, hkv, d = layer.num_heads, layer.num_kv_heads, layer.head_dim
    need = [math.ceil(n / block_size) for n in lengths]
    perm = torch.randperm(sum(need) + 3, generator=gen).tolist()
    cache = QuantizedCpuKVCache(KVCacheSpec(1, hkv, d, block_size, "bfloat16", kv), len(perm))
    garbage = torch.randn(len(perm) * block_size, hkv, d, generator=gen) * 1e3  # never read
    cache.write(0, garbage, garbage, torch.arange(len(perm) * block_size))
    chunks, refs, off = [], [], 0
    q = (torch.randn(len(lengths), h, d, generator=gen) * 2).to(dtype)
    for i, (n, nb) in enumerate(zip(lengths, need, strict=True)):
        table = perm[off : off + nb]
        off += nb
        k, v = torch.randn(n, hkv, d, generator=gen) * 2, torch.randn(n, hkv, d, generator=gen)
        slots = torch.tensor([table[t // block_size] * block_size + t % block_size for t in range(n)])
        cache.write(0, k.to(dtype), v.to(dtype), slots)
        ks, vs = cached_values(cache, table, n)
        qs = torch.zeros(n, h, d, dtype=torch.float64)
        qs[-1] = q[i].double()
        refs.append(dense_attention(qs, ks, vs, layer)[-1])
        chunks.append(SeqChunk(n - 1, 1, table, False))
    return q, cache, build_attention_metadata(chunks, block_size), torch.stack(refs)


LENGTHS = [1, 17, 40, 5, 100]


# every code type at head size 64 (the default model's); int8 at every head size the vector paths have a
# variant family for (a multiple of 32, of 16 only, the widest AMX takes)
SHAPES = [(kv, 64) for kv in KV_DTYPES] + [("int8", 32), ("int8", 80), ("int8", 128)]


@functools.cache
def shared_batch(layer, kv):
    """`make_batch(layer, kv, LENGTHS)`, built once for every path that reads it (none writes to it)."""
    return make_batch(layer, kv, LENGTHS)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("kv", "head_dim"), SHAPES)
def test_native_decode_on_each_path_matches_dense(impl, kv, head_dim):
    if impl not in quant_impls():
        pytest.skip(f"{MISSING_CPU_FEATURE}: this CPU has no {impl} path")
    if impl == "amx" and head_dim == 80:
        pytest.skip("the AMX path takes head sizes that are a multiple of 32")
    for (h, hkv), window, softcap in (((8, 2), None, None), ((6, 6), 7, 5.0)):
        layer = AttentionLayerSpec(h, hkv, head_dim, head_dim**-0.5, window, softcap)
        q, cache, meta, ref = shared_batch(layer, kv)
        attn = CpuNativeAttention()
        attn.quant_decode_impl = impl
        out = attn.decode(q, cache, 0, meta, layer)
        assert out.dtype == torch.bfloat16 and out.shape == q.shape
        # bfloat16 output (half a step of values up to ~3) over float32 sums
        assert (out.double() - ref).abs().max().item() < 2e-2, (impl, kv, head_dim, h, hkv)
        if impl != "amx":  # float32 queries: float32 all the way
            out = attn.decode(q.float(), cache, 0, meta, layer)
            assert out.dtype == torch.float32 and (out.double() - ref).abs().max().item() < 1e-4


def test_the_paths_refuse_what_they_cannot_run_by_name():
    from tgi.backends.cpu.native.kv_quant import paged_decode_quantized

    layer = AttentionLayerSpec(4, 2, 48, 48**-0.5)
    q, cache, meta, ref = make_batch(layer, "int8", [3, 20])
    keys, values = cache.layer(0)
    args = (keys, values, meta.decode_block_tables, meta.decode_seq_lens, layer.scale)
    out = paged_decode_quantized(q, *args)  # head size 48: no vector variant, "auto" takes the reference
    assert (out.double() - ref).abs().max().item() < 2e-2
    for impl in set(quant_impls()) - {"reference"}:
        with pytest.raises(RuntimeError, match=f"the {impl} decode (has no kernel for head size 48|needs)"):
            paged_decode_quantized(q, *args, impl=impl)
    if "amx" in quant_impls():
        layer = AttentionLayerSpec(4, 2, 64, 0.125)
        q, cache, meta, _ = make_batch(layer, "int8", [3])
        keys, values = cache.layer(0)
        with pytest.raises(RuntimeError, match="the amx decode needs bfloat16 queries"):
            paged_decode_quantized(
                q.float(), keys, values, meta.decode_block_tables, meta.decode_seq_lens, 0.1, impl="amx"
            )


def mixed_schedule(attn, kv, layer, dtype=torch.bfloat16):
    """Prompts prefilled in chunks (a later chunk reads the earlier's keys from the cache), then decodes, in
    mixed steps; every output row against dense attention over what the cache holds. Returns the max error."""
    gen = torch.Generator().manual_seed(1)
    h, hkv, d, bs = layer.num_heads, layer.num_kv_heads, layer.head_dim, 16
    pieces = [[20, 13, 1, 1], [1, 1, 1, 1], [40, 1, 1]]
    lengths = [sum(p) for p in pieces]
    perm = torch.randperm(sum(math.ceil(n / bs) for n in lengths) + 2, generator=gen).tolist()
    tables, off = [], 0
    for n in lengths:
        tables.append(perm[off : off + math.ceil(n / bs)])
        off += math.ceil(n / bs)
    cache = QuantizedCpuKVCache(KVCacheSpec(1, hkv, d, bs, "bfloat16", kv), len(perm))
    qs = [(torch.randn(n, h, d, generator=gen) * 2).to(dtype) for n in lengths]
    ks = [(torch.randn(n, hkv, d, generator=gen) * 2).to(dtype) for n in lengths]
    vs = [torch.randn(n, hkv, d, generator=gen).to(dtype) for n in lengths]
    done, worst = [0, 0, 0], 0.0
    for step in range(4):
        active = [i for i in range(3) if step < len(pieces[i])]
        prefill = [i for i in active if pieces[i][step] > 1 or done[i] == 0]
        order = prefill + [i for i in active if i not in prefill]
        chunks = [SeqChunk(done[i], pieces[i][step], tables[i], i in prefill) for i in order]
        meta = build_attention_metadata(chunks, bs)
        rows = [(i, done[i], done[i] + pieces[i][step]) for i in order]
        q, k, v = (torch.cat([x[i][a:b] for i, a, b in rows]) for x in (qs, ks, vs))
        cache.write(0, k, v, meta.slot_mapping)
        attn.prepare(meta)
        tp = meta.num_prefill_tokens
        out = []
        if tp:
            out.append(attn.prefill(q[:tp], k[:tp], v[:tp], cache, 0, meta, layer))
        if meta.num_decode_tokens:
            out.append(attn.decode(q[tp:], cache, 0, meta, layer))
        out = torch.cat(out)
        for (i, a, b), got in zip(rows, out.split([b - a for _, a, b in rows]), strict=True):
            kc, vc = cached_values(cache, tables[i], b)
            want = dense_attention(qs[i][:b], kc, vc, layer)[a:b]
            worst = max(worst, (got.double() - want).abs().max().item())
        for i, _, b in rows:
            done[i] = b
    return worst


@pytest.mark.parametrize("kv", KV_DTYPES)
@pytest.mark.parametrize("which", ["cpu-sdpa", "cpu-native", "cpu-native prefill", "cpu-native invariant"])
def test_prefill_and_decode_read_the_quantized_cache(kv, which, monkeypatch):
    if which == "cpu-native prefill":
        if not native.load().paged_prefill_available():
            pytest.skip(f"{MISSING_CPU_FEATURE}: the native prefill needs AVX512-BF16")
        monkeypatch.setenv("TGI_CPU_PREFILL_IMPL", "native")
    attn = (
        CpuAttention()
        if which == "cpu-sdpa"
        else CpuNativeAttention(batch_invariant=which.endswith("invariant"))
    )
    # bfloat16 outputs; SDPA's prefill also rounds the dequantized keys and values and its probabilities to
    # bfloat16 (the dense cache's attention is held to 6e-2: core.torch.testing.reference.TOLERANCE)
    tol = 4e-2 if which in ("cpu-sdpa", "cpu-native") else 2e-2
    for layer in (
        AttentionLayerSpec(8, 2, 64, 0.125, 24, None),
        AttentionLayerSpec(4, 2, 32, 32**-0.5, None, 4.0),
    ):
        assert mixed_schedule(attn, kv, layer) < tol, layer
