"""CpuAttention (paged prefill over ragged, chunked prompts + batched decode) against naive dense causal
attention computed in float64 on the full sequences."""

from __future__ import annotations

import math

import pytest
import torch

from tgi.backends.cpu.attention import CpuAttention
from tgi.backends.cpu.kv_cache import CpuKVCache
from tgi.core.interfaces import AttentionLayerSpec, UnsupportedError
from tgi.core.interfaces.types import KVCacheSpec
from tgi.core.models.context import SeqChunk, build_attention_metadata
from tgi.core.torch.testing.reference import dense_attention

# per sequence: prompt chunk lengths (a prompt split over steps), then decode steps
SCHEDULES = [
    [5, 8],  # 13-token prompt in 2 chunks
    [7],  # prompt in one chunk
    [4, 6, 9],  # 19 tokens in 3 chunks
    [1, 3],  # very short chunks
]
NUM_DECODES = 3


def run_schedule(layer: AttentionLayerSpec, block_size: int, dtype: torch.dtype, seed: int = 0):
    """Feed every sequence's prompt chunks and decode tokens through the paged cache, one step at a time
    (steps mix prefill chunks of some sequences with decodes of others). Returns the max abs error."""
    gen = torch.Generator().manual_seed(seed)
    pieces = [chunks + [1] * NUM_DECODES for chunks in SCHEDULES]
    lengths = [sum(p) for p in pieces]
    h, hkv, d = layer.num_heads, layer.num_kv_heads, layer.head_dim
    qs = [torch.randn(n, h, d, generator=gen) * 2 for n in lengths]
    ks = [torch.randn(n, hkv, d, generator=gen) * 2 for n in lengths]
    vs = [torch.randn(n, hkv, d, generator=gen) for n in lengths]
    refs = [
        dense_attention(q.to(dtype), k.to(dtype), v.to(dtype), layer)
        for q, k, v in zip(qs, ks, vs, strict=True)
    ]

    # scattered, non-contiguous physical blocks
    need = [math.ceil(n / block_size) for n in lengths]
    perm = torch.randperm(sum(need) + 3, generator=gen).tolist()
    tables, off = [], 0
    for n in need:
        tables.append(perm[off : off + n])
        off += n
    cache = CpuKVCache(KVCacheSpec(1, hkv, d, block_size, str(dtype).removeprefix("torch.")), len(perm))
    attn = CpuAttention()
    attn.check(layer, block_size, str(dtype).removeprefix("torch."))

    max_err = 0.0
    done = [0] * len(SCHEDULES)
    for step in range(max(len(p) for p in pieces)):
        active = [i for i in range(len(SCHEDULES)) if step < len(pieces[i])]
        is_prefill = {i: step < len(SCHEDULES[i]) for i in active}
        order = [i for i in active if is_prefill[i]] + [i for i in active if not is_prefill[i]]
        chunks = [SeqChunk(done[i], pieces[i][step], tables[i], is_prefill[i]) for i in order]
        meta = build_attention_metadata(chunks, block_size)
        rows = [(i, done[i], done[i] + pieces[i][step]) for i in order]
        q = torch.cat([qs[i][a:b] for i, a, b in rows]).to(dtype)
        k = torch.cat([ks[i][a:b] for i, a, b in rows]).to(dtype)
        v = torch.cat([vs[i][a:b] for i, a, b in rows]).to(dtype)
        cache.write(0, k, v, meta.slot_mapping)
        tp = meta.num_prefill_tokens
        attn.prepare(meta)
        outs = []
        if tp:
            outs.append(attn.prefill(q[:tp], k[:tp], v[:tp], cache, 0, meta, layer))
        if meta.num_decode_tokens:
            outs.append(attn.decode(q[tp:], cache, 0, meta, layer))
        out = torch.cat(outs)
        assert out.shape == q.shape and out.dtype == dtype
        expected = torch.cat([refs[i][a:b] for i, a, b in rows])
        max_err = max(max_err, (out.double() - expected).abs().max().item())
        for i, _, b in rows:
            done[i] = b
    return max_err


# query-head groups of 1, 3 and 4 each at two block sizes of 1, 4 and 16 (a token, a block, several blocks a
# chunk) and at both head sizes, instead of every combination (the torch reference has no per-shape code)
@pytest.mark.parametrize(
    "heads,head_dim,block_size",
    [((4, 4), 32, 1), ((6, 2), 64, 4), ((8, 2), 32, 16), ((4, 4), 64, 16), ((6, 2), 32, 1), ((8, 2), 64, 4)],
)
def test_paged_attention_float32(heads, head_dim, block_size):
    layer = AttentionLayerSpec(heads[0], heads[1], head_dim, head_dim**-0.5)
    assert run_schedule(layer, block_size, torch.float32) < 1e-5


# each window at two of the block sizes (within a block, across blocks)
@pytest.mark.parametrize("window,block_size", [(1, 1), (3, 4), (6, 16), (1, 16), (3, 1), (6, 4)])
def test_sliding_window(block_size, window):
    layer = AttentionLayerSpec(8, 2, 32, 32**-0.5, sliding_window=window)
    assert run_schedule(layer, block_size, torch.float32) < 1e-5


@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("block_size", [1, 4])
def test_softcap(window, block_size):
    layer = AttentionLayerSpec(6, 2, 32, 32**-0.5, sliding_window=window, softcap=3.0)
    assert run_schedule(layer, block_size, torch.float32) < 1e-5


@pytest.mark.parametrize(
    "layer",
    [
        AttentionLayerSpec(8, 2, 64, 0.125),
        AttentionLayerSpec(6, 2, 32, 32**-0.5, sliding_window=5, softcap=3.0),
    ],
    ids=["gqa4", "window+softcap"],
)
@pytest.mark.parametrize("block_size", [4, 16])
def test_paged_attention_bfloat16(layer, block_size):
    # bfloat16 inputs, reference in float64 on the same (rounded) inputs: bf16 has ~3 significant digits
    assert run_schedule(layer, block_size, torch.bfloat16) < 5e-2


def test_write_ignores_negative_slots():
    cache = CpuKVCache(KVCacheSpec(1, 2, 4, 4, "float32"), 2)
    k = torch.ones(3, 2, 4)
    cache.write(0, k, 2 * k, torch.tensor([5, -1, 0]))
    key, value = cache.layer(0)
    assert key.view(-1, 2, 4)[[0, 5]].eq(1).all() and value.view(-1, 2, 4)[[0, 5]].eq(2).all()
    assert key.view(-1, 2, 4).sum().item() == 2 * 2 * 4  # nothing else written


def test_caps_and_check():
    attn = CpuAttention()
    caps = attn.caps()
    assert caps.head_sizes is None and caps.sliding_window and caps.softcap
    attn.check(AttentionLayerSpec(4, 2, 80, 0.1, sliding_window=4, softcap=30.0), 16, "bfloat16")
    with pytest.raises(UnsupportedError, match="float16"):
        attn.check(AttentionLayerSpec(4, 2, 64, 0.1), 16, "float16")
    with pytest.raises(UnsupportedError, match="block size 3"):
        attn.check(AttentionLayerSpec(4, 2, 64, 0.1), 3, "float32")


def test_the_gather_workspace_serves_inside_and_outside_inference_mode():
    attention = CpuAttention()
    cache = torch.randn(8, 16, 2, 64)
    blocks = torch.tensor([1, 2])
    with torch.inference_mode():
        inside = attention._gather("k", cache, blocks).clone()
    outside = attention._gather("k", cache, blocks)  # raised before: an inference tensor written outside
    assert torch.equal(inside, outside) and torch.equal(outside[:16], cache[1].reshape(16, 2, 64))
