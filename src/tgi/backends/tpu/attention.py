"""Attention over the paged KV cache for the flat step layout (`tgi.core.static_shapes.flat.FlatBatch`), in JAX.

Every query token attends to its own sequence's keys at positions up to its own (causal), read through its
sequence's block table: one formulation for prefill chunks (over cached pages and the chunk itself) and
decodes alike, so mixed steps need no split. The cache is written first (`write_kv`), then read.

`reference_attention` is plain JAX (XLA on any platform: what runs on JAX's CPU devices); the Pallas kernel
of the same contract is `tgi.backends.tpu.pallas_attention.paged_attention`. Shapes:

* `q` [T, H, D]; `k_cache`, `v_cache` [L, num_blocks, block_size, KVH, D] (every layer: the functions
  read and write layer `layer` in place, never a copy of it); `H % KVH == 0`;
* `token_seq` [T] (the row of each token's sequence), `positions` [T], `block_tables` [S, W] int32.

A token at position `p` attends to the `p + 1` positions `0..p` of its sequence; padded tokens (position 0
of some row) attend to one key, so nothing is NaN, and their outputs are never read.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

#: the reference reads keys in chunks of whole blocks, at most this many (token, key) pairs at once
MAX_PAIRS_PER_CHUNK = 1 << 18


def write_kv(k_cache, v_cache, layer, k, v, slot_mapping):
    """The caches with `k`, `v` [T, KVH, D] written into layer `layer` at `slot_mapping` [T] (slot = block *
    block_size + offset); slots outside the cache (the padding's `pad_slot`) are dropped. One scatter per
    cache: in place when the caches are donated or carried through a loop."""
    bs = k_cache.shape[2]
    blocks, offsets = slot_mapping // bs, slot_mapping % bs
    k_cache = k_cache.at[layer, blocks, offsets].set(k.astype(k_cache.dtype), mode="drop")
    v_cache = v_cache.at[layer, blocks, offsets].set(v.astype(v_cache.dtype), mode="drop")
    return k_cache, v_cache


def _chunk_blocks(num_tokens: int, width: int, block_size: int) -> int:
    """The largest divisor of `width` whose chunk keeps `num_tokens * keys` within MAX_PAIRS_PER_CHUNK."""
    best = 1
    for c in range(1, width + 1):
        if width % c == 0 and num_tokens * c * block_size <= MAX_PAIRS_PER_CHUNK:
            best = c
    return best


def reference_attention(q, k_cache, v_cache, layer, token_seq, positions, block_tables, scale: float):
    """Causal paged attention over layer `layer` in float32, with an online softmax over chunks of blocks
    (memory bounded by MAX_PAIRS_PER_CHUNK whatever the context); returns [T, H, D] in `q`'s dtype."""
    t, h, d = q.shape
    _, _, bs, kvh, _ = k_cache.shape
    w = block_tables.shape[1]
    cb = _chunk_blocks(t, w, bs)
    tables = block_tables[token_seq]  # [T, W]
    qg = q.reshape(t, kvh, h // kvh, d).astype(jnp.float32) * scale

    def chunk(carry, j):
        m, total, acc = carry
        blocks = jax.lax.dynamic_slice_in_dim(tables, j * cb, cb, axis=1)  # [T, cb]
        keys = k_cache[layer, blocks].reshape(t, cb * bs, kvh, d).astype(jnp.float32)  # one gather
        values = v_cache[layer, blocks].reshape(t, cb * bs, kvh, d).astype(jnp.float32)
        s = jnp.einsum("tkgd,tckd->tkgc", qg, keys)
        visible = j * cb * bs + jnp.arange(cb * bs)[None, :] <= positions[:, None]  # [T, C]
        s = jnp.where(visible[:, None, None, :], s, -jnp.inf)
        m_new = jnp.maximum(m, s.max(axis=-1))  # finite from the first chunk on (position 0 is visible)
        p = jnp.exp(s - m_new[..., None])
        alpha = jnp.exp(m - m_new)
        acc = alpha[..., None] * acc + jnp.einsum("tkgc,tckd->tkgd", p, values)
        return (m_new, alpha * total + p.sum(axis=-1), acc), None

    g = h // kvh
    init = (
        jnp.full((t, kvh, g), -jnp.inf, jnp.float32),
        jnp.zeros((t, kvh, g), jnp.float32),
        jnp.zeros((t, kvh, g, d), jnp.float32),
    )
    (_, total, acc), _ = jax.lax.scan(chunk, init, jnp.arange(w // cb))
    return (acc / total[..., None]).reshape(t, h, d).astype(q.dtype)
