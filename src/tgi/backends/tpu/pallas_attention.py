"""A Pallas kernel for `tgi.backends.tpu.attention`'s contract (see there): causal paged attention for the
flat step layout, one program per query token, over its sequence's blocks with an online softmax.

It runs on JAX's CPU devices in Pallas' interpret mode (`interpret=True`), where tests compare it with
`reference_attention` (tests/unit/backends/tpu/test_tpu_kernels.py: within 2e-5 absolute in float32). It has never been
compiled for or run on a TPU (no TPU here): it reads whole blocks by plain ref indexing, which Mosaic may
refuse for a cache that does not fit in VMEM (a TPU version would DMA each block from HBM); the runner
uses it on a TPU only when asked (`TGI_JAX_ATTENTION=pallas`) and says so.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _kernel(
    layer_ref, seq_ref, pos_ref, tables_ref, q_ref, k_ref, v_ref, o_ref, *, scale: float, block_size: int
):
    t = pl.program_id(0)
    layer, row, pos = layer_ref[0], seq_ref[t], pos_ref[t]
    q = q_ref[0].astype(jnp.float32)  # [H, D]
    h, d = q.shape
    kvh = k_ref.shape[3]
    group = h // kvh

    def body(j, carry):
        m, total, acc = carry
        block = tables_ref[row, j]
        k = jnp.repeat(k_ref[layer, block].astype(jnp.float32), group, axis=1)  # [BS, H, D]
        v = jnp.repeat(v_ref[layer, block].astype(jnp.float32), group, axis=1)
        s = jnp.einsum("hd,bhd->hb", q, k) * scale
        visible = j * block_size + jnp.arange(block_size) <= pos
        s = jnp.where(visible[None, :], s, -jnp.inf)
        m_new = jnp.maximum(m, s.max(axis=1))
        p = jnp.exp(s - m_new[:, None])
        alpha = jnp.exp(m - m_new)
        return m_new, alpha * total + p.sum(axis=1), alpha[:, None] * acc + jnp.einsum("hb,bhd->hd", p, v)

    init = (
        jnp.full((h,), -jnp.inf, jnp.float32),
        jnp.zeros((h,), jnp.float32),
        jnp.zeros((h, d), jnp.float32),
    )
    _, total, acc = jax.lax.fori_loop(0, pos // block_size + 1, body, init)
    o_ref[0] = (acc / total[:, None]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("scale", "interpret"))
def paged_attention(
    q, k_cache, v_cache, layer, token_seq, positions, block_tables, scale: float, interpret: bool = True
):
    """`reference_attention`'s result, computed by the Pallas kernel (grid: one program per token)."""
    t, h, d = q.shape
    block_size = k_cache.shape[2]
    layer = jnp.asarray(layer, jnp.int32).reshape(1)
    return pl.pallas_call(
        functools.partial(_kernel, scale=scale, block_size=block_size),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(t,),
        in_specs=[
            pl.BlockSpec((1,), lambda i: (0,)),
            pl.BlockSpec(token_seq.shape, lambda i: (0,)),
            pl.BlockSpec(positions.shape, lambda i: (0,)),
            pl.BlockSpec(block_tables.shape, lambda i: (0, 0)),
            pl.BlockSpec((1, h, d), lambda i: (i, 0, 0)),
            pl.BlockSpec(k_cache.shape, lambda i: (0, 0, 0, 0, 0)),
            pl.BlockSpec(v_cache.shape, lambda i: (0, 0, 0, 0, 0)),
        ],
        out_specs=pl.BlockSpec((1, h, d), lambda i: (i, 0, 0)),
        interpret=interpret,
        name="tgi_paged_attention",
    )(layer, token_seq, positions, block_tables, q, k_cache, v_cache)
