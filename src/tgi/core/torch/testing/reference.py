"""Dense float64 attention, and a driver that runs a backend's paged attention over a mixed schedule.

The schedule feeds every sequence its prompt in chunks (chunked prefill: later chunks attend to pages the
earlier ones wrote), then one decode token at a time; a step mixes prefill chunks of some sequences with
decodes of others, exactly as the runner builds them. Physical blocks are scattered (a random permutation),
so block-table indirection is exercised. Every output row is compared with dense causal attention over the
whole sequence, computed in float64 from the same inputs rounded to the tested dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tgi.core.dtypes import to_torch_dtype
from tgi.core.interfaces import AttentionLayerSpec, KVCacheSpec
from tgi.core.models.context import SeqChunk, build_attention_metadata
from tgi.core.torch.backend import TorchBackend

#: max abs error allowed against the float64 reference (outputs are O(1): values ~ N(0, 1))
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 6e-2}

#: per sequence: prompt chunk lengths
SHORT_SCHEDULE = ((5, 8), (7,), (1, 3))
LONG_SCHEDULE = ((48, 40), (90,))  # long enough for a split-K decode to use several splits


@dataclass(frozen=True)
class AttentionCase:
    """One point of the attention grid."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    sliding_window: int | None = None
    softcap: float | None = None
    schedule: tuple[tuple[int, ...], ...] = SHORT_SCHEDULE
    num_decodes: int = 3

    def layer(self) -> AttentionLayerSpec:
        return AttentionLayerSpec(
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.head_dim**-0.5,
            self.sliding_window,
            self.softcap,
        )


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: AttentionLayerSpec
) -> torch.Tensor:
    """Causal attention of one whole sequence: q [S, H, D], k/v [S, Hkv, D] -> [S, H, D] float64."""
    s, h, _ = q.shape
    g = h // k.shape[1]
    qd, kd, vd = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    scores = torch.einsum("qhd,khd->hqk", qd, kd) * layer.scale
    if layer.softcap is not None:
        scores = torch.tanh(scores / layer.softcap) * layer.softcap
    pos = torch.arange(s)
    mask = pos[None, :] <= pos[:, None]
    if layer.sliding_window is not None:
        mask &= pos[None, :] > pos[:, None] - layer.sliding_window
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, -1), vd)


def run_attention_schedule(
    backend: TorchBackend, case: AttentionCase, dtype: str, seed: int = 0, kv_dtype: str = "auto"
) -> float:
    """Run `case` through `backend`'s KV cache (storing `kv_dtype`) and attention; return the max abs error
    against `dense_attention` of the unquantized inputs over every output row."""
    torch_dtype = to_torch_dtype(dtype)
    device = backend.torch_device()
    layer = case.layer()
    attention = backend.attention()
    attention.check(layer, case.block_size, dtype)
    gen = torch.Generator().manual_seed(seed)
    pieces = [list(chunks) + [1] * case.num_decodes for chunks in case.schedule]
    lengths = [sum(p) for p in pieces]
    h, hkv, d = case.num_heads, case.num_kv_heads, case.head_dim
    qs = [(torch.randn(n, h, d, generator=gen) * 2).to(torch_dtype) for n in lengths]
    ks = [(torch.randn(n, hkv, d, generator=gen) * 2).to(torch_dtype) for n in lengths]
    vs = [torch.randn(n, hkv, d, generator=gen).to(torch_dtype) for n in lengths]
    refs = [dense_attention(q, k, v, layer) for q, k, v in zip(qs, ks, vs, strict=True)]

    bs = case.block_size
    need = [math.ceil(n / bs) for n in lengths]
    perm = torch.randperm(sum(need) + 3, generator=gen).tolist()  # scattered physical blocks
    tables, off = [], 0
    for n in need:
        tables.append(perm[off : off + n])
        off += n
    cache = backend.create_kv_cache(KVCacheSpec(1, hkv, d, bs, dtype, kv_dtype), len(perm))

    max_err = 0.0
    done = [0] * len(pieces)
    for step in range(max(len(p) for p in pieces)):
        active = [i for i in range(len(pieces)) if step < len(pieces[i])]
        prefill = [i for i in active if step < len(case.schedule[i])]
        order = prefill + [i for i in active if i not in prefill]
        chunks = [SeqChunk(done[i], pieces[i][step], tables[i], i in prefill) for i in order]
        meta = build_attention_metadata(chunks, bs, device)
        rows = [(i, done[i], done[i] + pieces[i][step]) for i in order]
        q = torch.cat([qs[i][a:b] for i, a, b in rows]).to(device)
        k = torch.cat([ks[i][a:b] for i, a, b in rows]).to(device)
        v = torch.cat([vs[i][a:b] for i, a, b in rows]).to(device)
        cache.write(0, k, v, meta.slot_mapping)
        attention.prepare(meta)
        tp = meta.num_prefill_tokens
        outs = []
        if tp:
            outs.append(attention.prefill(q[:tp], k[:tp], v[:tp], cache, 0, meta, layer))
        if meta.num_decode_tokens:
            outs.append(attention.decode(q[tp:], cache, 0, meta, layer))
        out = torch.cat(outs)
        if out.shape != q.shape or out.dtype != torch_dtype:
            raise AssertionError(
                f"attention returned {tuple(out.shape)} {out.dtype}, expected {tuple(q.shape)} {torch_dtype}"
            )
        expected = torch.cat([refs[i][a:b] for i, a, b in rows])
        max_err = max(max_err, (out.cpu().double() - expected).abs().max().item())
        for i, _, b in rows:
            done[i] = b
    return max_err


def pick_block_size(wanted: int, supported: Sequence[int]) -> int:
    """`wanted` if supported, else the smallest supported size above it, else the largest."""
    if wanted in supported:
        return wanted
    above = [s for s in supported if s > wanted]
    return min(above) if above else max(supported)
