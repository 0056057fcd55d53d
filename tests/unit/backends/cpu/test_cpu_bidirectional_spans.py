"""Bidirectional spans in CpuAttention's prefill (`AttentionMetadata.prefill_bidirectional_spans`, Gemma 3's
image tokens): a span's tokens attend to each other both ways, the rest stays causal, within the sliding
window (transformers' AND(window, OR(causal, same span))); against a dense float64 reference, for a chunk
alone and for one over cached context, batched with a causal chunk."""

from __future__ import annotations

import pytest
import torch

from tgi.backends.cpu.attention import CpuAttention
from tgi.backends.cpu.kv_cache import CpuKVCache
from tgi.core.interfaces import AttentionLayerSpec
from tgi.core.interfaces.types import KVCacheSpec
from tgi.core.models.context import SeqChunk, build_attention_metadata, image_spans

H, HKV, D, BLOCK = 4, 2, 16, 4


def dense(q, k, v, spans, window, scale):
    """q [S, H, D], k/v [S, Hkv, D] of one whole sequence -> [S, H, D] float64 under the Gemma 3 mask."""
    s = q.shape[0]
    pos = torch.arange(s)
    mask = pos[None, :] <= pos[:, None]
    for lo, hi in spans:
        inside = (pos >= lo) & (pos < hi)
        mask |= inside[:, None] & inside[None, :]
    if window is not None:
        mask &= pos[None, :] > pos[:, None] - window
    kk = k.double().repeat_interleave(H // HKV, dim=1)
    vv = v.double().repeat_interleave(H // HKV, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), kk) * scale
    scores = scores.masked_fill(~mask[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), vv)


@pytest.mark.parametrize("window", [None, 6])
def test_spans_attend_both_ways_alone_and_over_cached_context(window) -> None:
    layer = AttentionLayerSpec(H, HKV, D, D**-0.5, window)
    gen = torch.Generator().manual_seed(0)
    # sequence a: 20 tokens, an image at [9, 16), prefilled as [0, 9) then [9, 20); b: 11 tokens, image [2, 8)
    lengths, spans = {"a": 20, "b": 11}, {"a": [(9, 16)], "b": [(2, 8)]}
    qs = {n: torch.randn(s, H, D, generator=gen) for n, s in lengths.items()}
    ks = {n: torch.randn(s, HKV, D, generator=gen) for n, s in lengths.items()}
    vs = {n: torch.randn(s, HKV, D, generator=gen) for n, s in lengths.items()}
    tables = {"a": [7, 1, 4, 9, 2], "b": [0, 5, 3]}
    cache = CpuKVCache(KVCacheSpec(1, HKV, D, BLOCK, "float32"), 10)
    attn = CpuAttention()
    outs = {n: [] for n in lengths}
    steps = [[("a", 0, 9), ("b", 0, 11)], [("a", 9, 20)]]
    for step in steps:
        meta = build_attention_metadata([SeqChunk(a, b - a, tables[n]) for n, a, b in step], BLOCK)
        meta.prefill_bidirectional_spans = [
            [(lo, hi) for lo, hi in spans[n] if a <= lo and hi <= b] for n, a, b in step
        ]
        q = torch.cat([qs[n][a:b] for n, a, b in step])
        k = torch.cat([ks[n][a:b] for n, a, b in step])
        v = torch.cat([vs[n][a:b] for n, a, b in step])
        cache.write(0, k, v, meta.slot_mapping)
        out = attn.prefill(q, k, v, cache, 0, meta, layer)
        row = 0
        for n, a, b in step:
            outs[n].append(out[row : row + b - a])
            row += b - a
    for n in lengths:
        expected = dense(qs[n], ks[n], vs[n], spans[n], window, layer.scale)
        assert (torch.cat(outs[n]).double() - expected).abs().max().item() < 1e-4
        causal = dense(qs[n], ks[n], vs[n], [], window, layer.scale)
        assert (torch.cat(outs[n]).double() - causal).abs().max().item() > 1e-2  # the spans are seen


def test_the_reference_attention_says_it_takes_spans_and_batch_invariant_native_does_not() -> None:
    from tgi.backends.cpu.attention import CpuNativeAttention

    assert CpuAttention().caps().bidirectional_spans
    assert CpuNativeAttention().caps().bidirectional_spans  # its prefill is the reference's
    assert not CpuNativeAttention(batch_invariant=True).caps().bidirectional_spans


def test_a_chunks_image_spans_and_a_split_image_refused() -> None:
    from types import SimpleNamespace

    from tgi.core.request import ImageInput

    images = tuple(ImageInput(None, lo, n, b"x") for lo, n in ((2, 4), (9, 3)))

    def chunk(start, n):
        return SimpleNamespace(
            request_id="r", token_ids=[0] * n, start_pos=start, is_prefill=True, images=images
        )

    assert image_spans([chunk(0, 8), chunk(6, 8)]) == [[(2, 6)], [(9, 12)]]
    with pytest.raises(ValueError, match="feeds part of the image at \\[9, 12\\)"):
        image_spans([chunk(0, 10)])
