"""The TPU backend's attention: the pure-JAX reference against a plain numpy computation, and the Pallas
kernel (interpret mode, JAX's CPU devices) against the reference, on decodes over block tables with ragged
context lengths, prefill chunks with causal masking (over cached pages), and a mixed step.

Tolerance: 2e-5 absolute and relative in float32 (the online softmax and the order of the sums differ).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from tgi.backends.tpu import attention
from tgi.backends.tpu.attention import reference_attention, write_kv
from tgi.backends.tpu.pallas_attention import paged_attention

TOL = 2e-5
L, NB, BS, KVH, H, D = 2, 24, 4, 2, 6, 8
LAYER = 1  # the caches hold every layer; the kernels read this one
SCALE = D**-0.5


def naive(q, kc, vc, token_seq, positions, tables):
    """Per token: softmax over its sequence's positions 0..p, in float64."""
    out = np.zeros(q.shape, np.float64)
    group = H // KVH
    for t in range(q.shape[0]):
        p, row = positions[t], tables[token_seq[t]]
        slots = [(row[i // BS], i % BS) for i in range(p + 1)]
        k = np.stack([kc[b, o] for b, o in slots]).astype(np.float64)  # [p+1, KVH, D]
        v = np.stack([vc[b, o] for b, o in slots]).astype(np.float64)
        for h in range(H):
            s = k[:, h // group] @ q[t, h] * SCALE
            w = np.exp(s - s.max())
            out[t, h] = (w / w.sum()) @ v[:, h // group]
    return out


def make_step(rng, seqs):
    """`seqs`: (start_pos, num_tokens) per sequence; random distinct blocks; returns the flat arrays."""
    width = max(-(-(s + n) // BS) for s, n in seqs)
    blocks = rng.permutation(NB)
    tables = np.zeros((len(seqs), width), np.int32)
    token_seq, positions, at = [], [], 0
    for r, (start, n) in enumerate(seqs):
        used = -(-(start + n) // BS)
        tables[r, :used] = blocks[at : at + used]
        at += used
        token_seq += [r] * n
        positions += list(range(start, start + n))
    t = len(positions)
    q = rng.standard_normal((t, H, D)).astype(np.float32)
    kc = rng.standard_normal((L, NB, BS, KVH, D)).astype(np.float32)
    vc = rng.standard_normal((L, NB, BS, KVH, D)).astype(np.float32)
    return q, kc, vc, np.array(token_seq, np.int32), np.array(positions, np.int32), tables


CASES = {
    "decode-ragged": [(0, 1), (6, 1), (13, 1), (3, 1), (22, 1)],  # one token each, contexts 1..23
    # a fresh prompt (each token sees the chunk up to itself) and a chunk after 9 cached positions
    "prefill-causal": [(0, 11), (9, 7)],
    "mixed": [(0, 6), (4, 3), (17, 1), (2, 1)],
}


@pytest.mark.parametrize("name", CASES)
def test_reference_and_pallas_kernel(name: str) -> None:
    rng = np.random.default_rng(len(name))
    q, kc, vc, token_seq, positions, tables = make_step(rng, CASES[name])
    expected = naive(q, kc[LAYER], vc[LAYER], token_seq, positions, tables)
    args = (jnp.asarray(q), jnp.asarray(kc), jnp.asarray(vc), LAYER, token_seq, positions, tables)
    ref = np.asarray(reference_attention(*args, SCALE))
    np.testing.assert_allclose(ref, expected, atol=TOL, rtol=TOL)
    kernel = np.asarray(paged_attention(*args, scale=SCALE, interpret=True))
    np.testing.assert_allclose(kernel, ref, atol=TOL, rtol=TOL)


def test_reference_in_small_chunks_equals_one_chunk(monkeypatch) -> None:
    rng = np.random.default_rng(1)
    q, kc, vc, token_seq, positions, tables = make_step(rng, CASES["mixed"])
    args = (jnp.asarray(q), jnp.asarray(kc), jnp.asarray(vc), LAYER, token_seq, positions, tables)
    whole = np.asarray(reference_attention(*args, SCALE))
    monkeypatch.setattr(attention, "MAX_PAIRS_PER_CHUNK", q.shape[0] * BS)  # one block per chunk
    assert attention._chunk_blocks(q.shape[0], tables.shape[1], BS) == 1
    np.testing.assert_allclose(np.asarray(reference_attention(*args, SCALE)), whole, atol=TOL, rtol=TOL)


def test_write_kv_writes_its_layer_and_drops_the_pad_slot() -> None:
    kc = jnp.zeros((L, 2, BS, KVH, D))
    k = jnp.ones((3, KVH, D))
    new_k, _ = write_kv(kc, kc, LAYER, k, k, np.array([1, 6, 2 * BS], np.int32))  # the last: past the cache
    flat = np.asarray(new_k).reshape(L, 2 * BS, KVH, D)
    assert flat[LAYER, [1, 6]].min() == 1 and np.delete(flat[LAYER], [1, 6], axis=0).max() == 0
    assert flat[1 - LAYER].max() == 0
