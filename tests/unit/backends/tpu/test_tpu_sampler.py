"""The TPU backend's JAX sampler meets the framework-free sampler conformance (the torch samplers' cases and
reference), through the same host inputs and executables the runner uses (the `full` variant; the
`greedy` one for rows that need nothing more)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tgi.backends.tpu import sampler as smp
from tgi.core.testing.sampler_conformance import SamplerConformance
from tgi.core.testing.sampling_cases import SAMPLER_CASES

PAD_ROWS = 16
FULL = jax.jit(smp.full)


class TestJaxSampler(SamplerConformance):
    supports_token_masks = True
    unsupported_sampling = smp.UNSUPPORTED_SAMPLING  # logits processors (torch plugins): refused by name

    def sample(self, case):
        logits = np.asarray(case.logits, np.float32)
        rows, n = case.rows, len(case.rows)
        assert smp.needs_full(rows, case.token_masks) or all(not r.sampling.do_sample for r in rows)
        # padded with neutral greedy rows to one batch size, as the runner pads to its buckets: the cases of
        # one vocabulary share one executable instead of compiling one each
        size = max(PAD_ROWS, 1 << (n - 1).bit_length())
        padded = np.concatenate([logits, np.zeros((size - n, logits.shape[1]), np.float32)])
        inputs = smp.full_inputs(rows, case.token_masks, size, logits.shape[1])
        ids, lps, *_ = FULL(padded, *inputs.arrays())
        return np.asarray(ids)[:n].tolist(), np.asarray(lps)[:n].tolist()


def test_greedy_variant_equals_full_variant_and_pads() -> None:
    case = SAMPLER_CASES["greedy"]()
    plain = [r for r in case.rows if not smp.needs_full([r], None)]
    assert plain
    logits = np.asarray(case.logits, np.float32)[: len(plain)]
    padded = np.concatenate([logits, np.zeros((3, logits.shape[1]), np.float32)])  # 3 padded rows
    g_ids, g_lps, g_top, g_top_lps, g_all = (np.asarray(a) for a in jax.jit(smp.greedy)(padded))
    inputs = smp.full_inputs(plain, None, len(padded), logits.shape[1])
    f_ids, f_lps, f_top, _, _ = (np.asarray(a) for a in jax.jit(smp.full)(padded, *inputs.arrays()))
    n = len(plain)
    assert g_ids[:n].tolist() == f_ids[:n].tolist() == logits.argmax(axis=1).tolist()
    np.testing.assert_allclose(g_lps[:n], f_lps[:n], atol=1e-6)
    assert (g_top[:n] == f_top[:n]).all() and g_top.shape[1] == min(smp.TOP_N, logits.shape[1])
    assert (g_top_lps[:n, :-1] >= g_top_lps[:n, 1:]).all()  # best first
    np.testing.assert_allclose(np.take_along_axis(g_all, g_top, axis=1), g_top_lps, atol=1e-6)


def test_noise_bits_equal_the_specification() -> None:
    from tgi.core.interfaces import sampling as spec

    seeds, steps = [0, 7, 2**64 - 1, 123456789], [0, 3, 5, 1000]
    got = smp.uniform_noise(seeds, steps, 50)
    for i, (seed, step) in enumerate(zip(seeds, steps, strict=True)):
        assert got[i].tolist() == pytest.approx(spec.uniform_noise(seed, step, 50), abs=0)
    marks = smp.watermark_uniform([3, 99], 40)
    assert marks[1].tolist() == pytest.approx([spec.watermark_uniform(99, j) for j in range(40)], abs=0)
