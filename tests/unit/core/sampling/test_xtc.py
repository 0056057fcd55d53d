"""XTC (llama.cpp's "exclude top choices"): against a small independent implementation of its published
definition (with probability xtc_probability, when two or more tokens have a probability >= xtc_threshold,
all of them but the least likely are removed), on fixed logits; its draw comes from the request's seed."""

from __future__ import annotations

import math

import pytest
import torch

from tgi.core.interfaces import sampling as spec
from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.sampling import processors as P
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import SamplingParams

LOGITS = [3.0, 2.6, 2.2, 0.5, -1.0, -2.0]  # probabilities ~0.47, 0.31, 0.21, 0.04, ...


def published_xtc(logits: list[float], threshold: float, acts: bool) -> list[int]:
    """The tokens XTC leaves (before the draw), by its definition."""
    top = max(logits)
    weights = [math.exp(v - top) for v in logits]
    probs = [w / sum(weights) for w in weights]
    above = [t for t, p in enumerate(probs) if p >= threshold]
    if not acts or len(above) < 2:
        return list(range(len(logits)))
    least = min(above, key=lambda t: probs[t])
    return [t for t in range(len(logits)) if t not in above or t == least]


def row(seed: int, step: int = 0, **kw) -> ScheduledSequence:
    tokens = [1, 2, *range(step)]
    return ScheduledSequence(
        f"r{seed}", [tokens[-1]], len(tokens) - 1, [0], False, True, SamplingParams(do_sample=True, **kw),
        seed, 2, tokens,
    )  # fmt: skip


def expected_draw(logits: list[float], kept: list[int], seed: int, step: int) -> int:
    """Gumbel-max over the kept tokens with the specification's noise."""
    noise = spec.uniform_noise(seed, step, len(logits))
    return max(kept, key=lambda t: (logits[t] - math.log(-math.log(noise[t])), -t))


@pytest.mark.parametrize(
    ("threshold", "probability"), [(0.1, 1.0), (0.25, 1.0), (0.1, 0.4), (0.5, 1.0), (0.0, 1.0)]
)
def test_draws_equal_the_published_definition(threshold, probability):
    n = 64
    rows = [row(seed, xtc_probability=probability, xtc_threshold=threshold) for seed in range(n)]
    out = TorchSampler().sample(torch.tensor([LOGITS] * n), rows).token_ids.tolist()
    acted = 0
    for seed, token in enumerate(out):
        acts = spec.xtc_uniform(seed, 0) <= probability
        acted += acts
        kept = published_xtc(LOGITS, threshold, acts)
        assert token == expected_draw(LOGITS, kept, seed, 0), seed
    assert 0 < acted <= n if probability > 0 else acted == 0


def test_it_removes_the_top_choices_and_keeps_the_least_likely_of_them():
    n = 400
    rows = [row(seed, xtc_probability=1.0, xtc_threshold=0.2) for seed in range(n)]
    drawn = set(TorchSampler().sample(torch.tensor([LOGITS] * n), rows).token_ids.tolist())
    assert 0 not in drawn and 1 not in drawn and 2 in drawn  # 0.47 and 0.31 out, 0.21 stays


def test_one_token_above_the_threshold_or_a_threshold_above_one_half_changes_nothing():
    for threshold in (0.4, 0.6):
        kept = published_xtc(LOGITS, threshold, acts=True)
        assert kept == list(range(len(LOGITS)))
        rows = [row(seed, xtc_probability=1.0, xtc_threshold=threshold) for seed in range(32)]
        plain = [row(seed) for seed in range(32)]
        batch = torch.tensor([LOGITS] * 32)
        assert torch.equal(
            TorchSampler().sample(batch, rows).token_ids, TorchSampler().sample(batch, plain).token_ids
        )


def test_its_draw_is_the_seeded_stream_and_acts_as_often_as_asked():
    seeds = torch.tensor([P.seed_to_i64(s) for s in range(4000)])
    steps = torch.arange(4000) % 7
    u = P.xtc_uniform(seeds, steps)
    assert [float(v) for v in u[:50]] == [spec.xtc_uniform(s, s % 7) for s in range(50)]
    assert abs(float((u <= 0.3).float().mean()) - 0.3) < 0.03


def test_the_same_seed_draws_the_same_whatever_shares_the_batch():
    alone = TorchSampler().sample(torch.tensor([LOGITS]), [row(7, 3, xtc_probability=0.5)]).token_ids
    others = [row(s, 1, top_k=2) for s in range(5)]
    mixed = TorchSampler().sample(torch.tensor([LOGITS] * 6), [*others, row(7, 3, xtc_probability=0.5)])
    assert mixed.token_ids[-1] == alone[0]
