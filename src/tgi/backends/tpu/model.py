"""The Llama-family decoder in JAX, for one step of the flat layout, on one device's shard.

`decoder` runs inside the runner's `shard_map` over a 1-D mesh (axis `tp`): each device holds its heads'
columns of q/k/v, its rows of o_proj, its slice of the MLP width and its KV heads' cache; the partial sums
of o_proj and down_proj meet through the JAX collective (`all_reduce` = `psum` over the mesh axis). With
one device the collective is the identity. Layers run under `jax.lax.scan` over the stacked weights, the
KV cache `[L, num_blocks, block_size, KVH, D]` travels in the scan's carry and is written (one scatter)
and read (gathers of the blocks a step needs) at the layer's index, never sliced out: it is updated in
place (the runner donates it), and a step moves only the blocks it reads.

Numerics follow transformers' Llama: RMSNorm in float32 then cast, rotate-half RoPE, softmax in float32,
logits in float32.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def rms_norm(x, weight, eps: float):
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return weight * x32.astype(x.dtype)


def rotate(x, cos, sin):
    """Rotate-half RoPE on `x` [T, N, D] with `cos`, `sin` [T, D/2] (float32)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    c, s = cos[:, None, :], sin[:, None, :]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(x.dtype)


def decoder(
    params: dict,
    k_cache,
    v_cache,
    input_ids,
    positions,
    slot_mapping,
    token_seq,
    block_tables,
    *,
    inv_freq,
    attention_scaling: float,
    head_dim: int,
    eps: float,
    scale: float,
    attention: Callable,
    all_reduce: Callable,
):
    """Hidden states after the final norm `[T, hidden]` and the updated caches."""
    from tgi.backends.tpu.attention import write_kv

    x = params["embed"][input_ids]
    freqs = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
    cos, sin = jnp.cos(freqs) * attention_scaling, jnp.sin(freqs) * attention_scaling
    t = input_ids.shape[0]

    def layer(carry, xs):
        x, kc, vc = carry
        w, i = xs
        h = rms_norm(x, w["attn_norm"], eps)
        q, k, v = h @ w["wq"], h @ w["wk"], h @ w["wv"]
        if "bq" in w:
            q, k, v = q + w["bq"], k + w["bk"], v + w["bv"]
        q = rotate(q.reshape(t, -1, head_dim), cos, sin)
        k = rotate(k.reshape(t, -1, head_dim), cos, sin)
        v = v.reshape(t, -1, head_dim)
        kc, vc = write_kv(kc, vc, i, k, v, slot_mapping)
        o = attention(q, kc, vc, i, token_seq, positions, block_tables, scale)
        x = x + all_reduce(o.reshape(t, -1) @ w["wo"])
        h = rms_norm(x, w["mlp_norm"], eps)
        x = x + all_reduce((jax.nn.silu(h @ w["w_gate"]) * (h @ w["w_up"])) @ w["w_down"])
        return (x, kc, vc), None

    num_layers = params["layers"]["wq"].shape[0]
    (x, k_cache, v_cache), _ = jax.lax.scan(
        layer, (x, k_cache, v_cache), (params["layers"], jnp.arange(num_layers))
    )
    return rms_norm(x, params["norm"], eps), k_cache, v_cache


def logits(lm_head, hidden, all_gather: Callable | None):
    """float32 logits `[N, V]` of `hidden` `[N, hidden]`; `all_gather` joins vocabulary shards (None: the
    head is whole on every device)."""
    out = jnp.dot(hidden, lm_head, preferred_element_type=jnp.float32)
    return out if all_gather is None else all_gather(out)
