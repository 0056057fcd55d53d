"""The seeded noise at chosen ids, and the sampler's top-k draw from the candidates' noise only: the same
bits and tokens as the full `[N, vocab]` noise."""

from __future__ import annotations

import pytest
import torch

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.sampling import processors as P
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import SamplingParams


def test_noise_at_ids_is_the_full_noise_gathered():
    seeds = torch.tensor([P.seed_to_i64(s) for s in (0, 1, 2**63 + 5, 2**64 - 1)], dtype=torch.int64)
    steps = torch.tensor([0, 7, 3, 100], dtype=torch.int64)
    ids = torch.randint(0, 1000, (4, 37), generator=torch.Generator().manual_seed(1))
    assert torch.equal(
        P.hash_uniform_at(seeds, steps, ids), P.hash_uniform(seeds, steps, 1000).gather(1, ids)
    )
    assert torch.equal(
        P.exponential_noise_at(seeds, steps, ids), P.exponential_noise(seeds, steps, 1000).gather(1, ids)
    )


def _rows(n: int, **params) -> list[ScheduledSequence]:
    out = []
    for i in range(n):
        sp = SamplingParams(max_new_tokens=8, seed=1000 + i, **params) if i % 5 else SamplingParams()
        out.append(ScheduledSequence(f"r{i}", [5], 9, [0], False, True, sp, 1000 + i, 1, [1] * (10 + i % 3)))
    return out


@pytest.mark.parametrize("params", [dict(top_k=50), dict(top_k=7, top_p=0.8), dict(top_k=3, typical_p=0.9)])
def test_a_top_k_draw_takes_the_token_of_the_full_noise(params):
    n, vocab = 128, 3000
    logits = torch.randn(n, vocab, generator=torch.Generator().manual_seed(2)) * 2
    logits[3, :] = 0.0  # every score tied before the noise
    rows = _rows(n, do_sample=True, temperature=0.7, **params)
    got = TorchSampler().sample(logits, rows)
    # the draw over the whole vocabulary: the truncated logits minus the log of the full noise
    x = (
        logits
        / torch.tensor([r.sampling.temperature if r.sampling.do_sample else 1.0 for r in rows])[:, None]
    )
    top_k = torch.tensor([r.sampling.top_k if r.sampling.do_sample else 0 for r in rows])
    top_p = torch.tensor([r.sampling.top_p if r.sampling.do_sample else 1.0 for r in rows])
    P.apply_top_k_top_p(x, top_k, top_p, max_k=int(top_k.max()))
    typical = torch.tensor([r.sampling.typical_p if r.sampling.do_sample else 1.0 for r in rows])
    if (typical < 1).any():
        P.apply_typical_p(x, typical)
    seeds = torch.tensor([P.seed_to_i64(r.seed) for r in rows])
    steps = torch.tensor([r.num_generated for r in rows])
    full = (x - P.exponential_noise(seeds, steps, vocab).log()).argmax(dim=1)
    sampled = torch.tensor([r.sampling.do_sample for r in rows])
    want = torch.where(sampled, full, logits.argmax(dim=1))
    assert torch.equal(got.token_ids, want)
