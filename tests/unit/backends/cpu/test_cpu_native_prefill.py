"""The native paged prefill kernel (`native.paged_prefill`, native/paged_prefill.cpp: bfloat16 on AVX512-BF16)
against a float64 reference computed per query from its sequence's keys/values, and through `CpuNativeAttention`
against the SDPA reference prefill ("cpu-sdpa"): chunks with and without cached context, several chunks in one
step, scattered block tables, block sizes 1 to 16, GQA ratios, head sizes 32 to 256, windows, soft-caps. And
how it is asked for (`TGI_CPU_PREFILL_IMPL=native`; SDPA is the default) and what it refuses by name: float32,
a head size it has no path for, bidirectional spans."""

from __future__ import annotations

import math

import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

from tgi.backends.cpu import native
from tgi.backends.cpu.attention import CpuAttention, CpuNativeAttention
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.backends.cpu.kv_cache import CpuKVCache
from tgi.core.interfaces import AttentionLayerSpec, UnsupportedError
from tgi.core.interfaces.types import KVCacheSpec
from tgi.core.models.context import SeqChunk, build_attention_metadata

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)

#: the output is rounded to bfloat16 once: half a step at |o| < 4 is 2^-7; the kernel's own sums add less
TOL = 1.6e-2


def require_prefill() -> None:
    missing = [f for f in ("avx512f", "avx512bw", "avx512_bf16") if f not in cpu_info().flags]
    if missing:
        pytest.skip(f"{MISSING_CPU_FEATURE}: {', '.join(missing)}")
    assert native.load().paged_prefill_available(), "this CPU has AVX512-BF16, the kernels miss the prefill"


def make_step(layer: AttentionLayerSpec, block_size: int, chunks: list[tuple[int, int]], seed: int = 0):
    """A filled bfloat16 cache holding every chunk's context and its own keys/values (as the model writes them
    before attention), scattered over shuffled blocks, the chunks' queries and the step's metadata."""
    gen = torch.Generator().manual_seed(seed)
    hkv, d = layer.num_kv_heads, layer.head_dim
    need = [math.ceil((start + n) / block_size) for start, n in chunks]
    perm = torch.randperm(sum(need) + 3, generator=gen).tolist()
    cache = CpuKVCache(KVCacheSpec(1, hkv, d, block_size, "bfloat16"), len(perm))
    kc, vc = cache.layer(0)
    kc.copy_(torch.randn(kc.shape, generator=gen).bfloat16())
    vc.copy_(torch.randn(vc.shape, generator=gen).bfloat16())
    tables, at = [], 0
    for count in need:
        tables.append(perm[at : at + count])
        at += count
    seqs = [SeqChunk(start, n, table, True) for (start, n), table in zip(chunks, tables, strict=True)]
    meta = build_attention_metadata(seqs, block_size)
    total = sum(n for _, n in chunks)
    q = (torch.randn(total, layer.num_heads, d, generator=gen) * 2).bfloat16()
    return cache, q, meta, tables


def reference(layer, cache, q, chunks, tables) -> torch.Tensor:
    """Each query against its sequence's keys up to its own position (within the window), in float64."""
    kc, vc = cache.layer(0)
    bs, g = kc.shape[1], layer.num_heads // layer.num_kv_heads
    out = torch.empty(q.shape, dtype=torch.float64)
    row = 0
    for (start, n), table in zip(chunks, tables, strict=True):
        positions = torch.arange(start + n)
        blocks = torch.tensor(table)[positions // bs]
        keys, values = kc[blocks, positions % bs].double(), vc[blocks, positions % bs].double()
        for i in range(n):
            pos = start + i
            lo = 0 if layer.sliding_window is None else max(0, pos - layer.sliding_window + 1)
            k = keys[lo : pos + 1].repeat_interleave(g, 1)
            v = values[lo : pos + 1].repeat_interleave(g, 1)
            scores = torch.einsum("hd,khd->hk", q[row + i].double(), k) * layer.scale
            if layer.softcap is not None:
                scores = torch.tanh(scores / layer.softcap) * layer.softcap
            out[row + i] = torch.einsum("hk,khd->hd", torch.softmax(scores, -1), v)
        row += n
    return out


def run_kernel(layer, cache, q, meta) -> torch.Tensor:
    kc, vc = cache.layer(0)
    return native.paged_prefill(
        q, kc, vc, meta.prefill_block_tables, meta.query_start_loc, meta.prefill_seq_lens, layer.scale,
        layer.sliding_window, layer.softcap,
    )  # fmt: skip


CASES = [
    # (heads, kv heads, head size, block size, chunks (cached tokens before, tokens), window, soft-cap)
    (9, 3, 64, 16, [(0, 37)], None, None),  # the default model's attention, a first chunk
    (9, 3, 64, 16, [(0, 250), (40, 33), (5, 1)], None, None),  # three chunks, two with cached context
    (4, 1, 128, 1, [(3, 20), (0, 5)], None, None),
    (8, 2, 32, 4, [(17, 40)], 9, None),  # a window shorter than the chunk
    (8, 8, 64, 16, [(30, 50)], None, 5.0),
    (6, 2, 256, 8, [(0, 19), (64, 17)], 30, 20.0),
    (32, 8, 64, 16, [(0, 70), (100, 16)], None, None),  # Llama-3.2-1B's attention
    (2, 2, 96, 2, [(1, 3)], None, None),
]


@pytest.mark.parametrize("heads,kv_heads,head_size,block_size,chunks,window,softcap", CASES)
def test_paged_prefill_matches_float64_reference(
    heads, kv_heads, head_size, block_size, chunks, window, softcap
):
    require_prefill()
    layer = AttentionLayerSpec(heads, kv_heads, head_size, head_size**-0.5, window, softcap)
    cache, q, meta, tables = make_step(layer, block_size, chunks)
    out = run_kernel(layer, cache, q, meta)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    error = (out.double() - reference(layer, cache, q, chunks, tables)).abs().max().item()
    assert error < TOL, error


@pytest.mark.parametrize("window", [None, 11])
def test_a_query_gets_the_same_bits_however_the_prompt_is_cut(window):
    """One 40-token prompt prefilled whole, in two chunks (the second on the first's cached keys) and beside
    another sequence: every query's output is the same bits (each lane's sums run over the same key tiles)."""
    require_prefill()
    layer = AttentionLayerSpec(9, 3, 64, 0.125, window)
    cache, q, meta, tables = make_step(layer, 16, [(0, 40)], seed=3)
    whole = run_kernel(layer, cache, q, meta)
    kc, vc = cache.layer(0)
    table = torch.tensor([tables[0]], dtype=torch.int32)
    for cut in (1, 17, 33):
        first = native.paged_prefill(q[:cut], kc, vc, table, torch.tensor([0, cut], dtype=torch.int32),
                                     torch.tensor([cut], dtype=torch.int32), 0.125, window)  # fmt: skip
        rest = native.paged_prefill(q[cut:], kc, vc, table, torch.tensor([0, 40 - cut], dtype=torch.int32),
                                    torch.tensor([40], dtype=torch.int32), 0.125, window)  # fmt: skip
        assert torch.equal(torch.cat([first, rest]), whole), cut
    # beside another sequence's chunk (the same blocks read again as a second sequence)
    both = native.paged_prefill(torch.cat([q[:5], q]), kc, vc, torch.cat([table, table]),
                                torch.tensor([0, 5, 45], dtype=torch.int32), torch.tensor([5, 40], dtype=torch.int32),
                                0.125, window)  # fmt: skip
    assert torch.equal(both[5:], whole) and torch.equal(both[:5], whole[:5])


def chunk_kv(cache, chunks, tables) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunks' own keys and values [tokens, Hkv, Dh], read back from the cache."""
    kc, vc = cache.layer(0)
    bs = kc.shape[1]
    slots = [table[p // bs] * bs + p % bs for (start, n), table in zip(chunks, tables, strict=True)
             for p in range(start, start + n)]  # fmt: skip
    index = torch.tensor(slots)
    return kc.flatten(0, 1)[index], vc.flatten(0, 1)[index]


@pytest.mark.parametrize("chunks", [[(0, 45)], [(16, 30), (0, 7)]])
def test_native_attention_prefill_agrees_with_the_sdpa_reference(chunks, monkeypatch):
    """Through the attention backend: `CpuNativeAttention` asked for the kernel, `CpuAttention` SDPA."""
    require_prefill()
    monkeypatch.setenv("TGI_CPU_PREFILL_IMPL", "native")
    layer = AttentionLayerSpec(9, 3, 64, 0.125)
    cache, q, meta, tables = make_step(layer, 16, chunks, seed=1)
    k, v = chunk_kv(cache, chunks, tables)
    native_out = CpuNativeAttention().prefill(q, k, v, cache, 0, meta, layer)
    assert torch.equal(native_out, run_kernel(layer, cache, q, meta))
    sdpa_out = CpuAttention().prefill(q, k, v, cache, 0, meta, layer)
    want = reference(layer, cache, q, chunks, tables)
    assert (sdpa_out.double() - want).abs().max().item() < TOL
    assert (native_out.double() - want).abs().max().item() < TOL


def test_asked_for_by_name_and_refusing_what_it_cannot_run(monkeypatch):
    require_prefill()
    assert native.prefill_supported(torch.bfloat16, 64)
    assert not native.prefill_supported(torch.float32, 64)
    assert not native.prefill_supported(torch.bfloat16, 80)  # no path for head sizes not a multiple of 32
    layer = AttentionLayerSpec(2, 1, 64, 0.125)
    cache, q, meta, _ = make_step(layer, 16, [(0, 9)])
    with pytest.raises(RuntimeError, match="bfloat16"):
        run_kernel(layer, cache, q.float(), meta)
    k = v = torch.zeros(9, 1, 64, dtype=torch.bfloat16)
    calls = []
    real = native.paged_prefill
    monkeypatch.setattr(native, "paged_prefill", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    default = CpuNativeAttention()  # SDPA unless asked
    assert default.caps().bidirectional_spans
    default.prefill(q, k, v, cache, 0, meta, layer)
    assert calls == []
    monkeypatch.setenv("TGI_CPU_PREFILL_IMPL", "native")
    attention = CpuNativeAttention()
    assert not attention.caps().bidirectional_spans  # so a model with image spans is refused at load
    attention.prefill(q, k, v, cache, 0, meta, layer)
    assert len(calls) == 1
    with pytest.raises(UnsupportedError, match="float32"):
        attention.prefill(q.float(), k.float(), v.float(), cache, 0, meta, layer)
    meta.prefill_bidirectional_spans = [[(2, 5)]]
    with pytest.raises(UnsupportedError, match="both ways"):
        attention.prefill(q, k, v, cache, 0, meta, layer)
    monkeypatch.setenv("TGI_CPU_PREFILL_IMPL", "fast")
    with pytest.raises(ValueError, match="TGI_CPU_PREFILL_IMPL"):
        CpuNativeAttention()
