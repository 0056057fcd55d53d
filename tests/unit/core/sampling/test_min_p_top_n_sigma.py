"""min-p (vLLM's: after temperature, tokens below min_p x the top probability are out) and top-n-sigma
(llama.cpp's: logits below max - n x their standard deviation are out), on fixed logits."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.sampling import processors as P
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import SamplingParams

LOGITS = torch.tensor([2.0, 1.7, 1.0, 0.2, -0.5, -3.0, -3.0, 1.9])


def rows(n: int, **kw) -> list[ScheduledSequence]:
    return [
        ScheduledSequence(f"r{s}", [2], 2, [0], False, True, SamplingParams(**kw), s, 2, [1, 2, 3])
        for s in range(n)
    ]


def draws(n: int, logits=LOGITS, **kw) -> set[int]:
    return set(TorchSampler().sample(logits.expand(n, -1).contiguous(), rows(n, **kw)).token_ids.tolist())


def test_min_p_one_at_temperature_one_is_greedy():
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(0))
    sampled = TorchSampler().sample(logits, rows(64, do_sample=True, min_p=1.0)).token_ids
    greedy = TorchSampler().sample(logits, rows(64)).token_ids
    assert torch.equal(sampled, greedy)


@pytest.mark.parametrize(("min_p", "temperature"), [(0.5, 1.0), (0.3, 1.0), (0.5, 0.5), (0.2, 3.0)])
def test_min_p_keeps_the_tokens_at_least_min_p_times_as_likely_as_the_top_one(min_p, temperature):
    probs = (LOGITS / temperature).softmax(0)
    expected = {t for t in range(len(LOGITS)) if probs[t] >= min_p * probs.max()}
    assert draws(600, do_sample=True, min_p=min_p, temperature=temperature) == expected


def test_min_p_comes_before_top_p_as_in_vllm():
    # min_p 0.5 keeps {0, 1, 7}; top_p 0.6 of what is left is then {0, 7}: applied to the whole
    # distribution top_p would keep {0, 7, 1}
    assert draws(600, do_sample=True, min_p=0.5, top_p=0.6) == {0, 7}


@pytest.mark.parametrize("n_sigma", [0.3, 1.0, 2.0])
def test_top_n_sigma_keeps_the_logits_within_n_standard_deviations_of_the_top(n_sigma):
    values = LOGITS.tolist()
    floor = max(values) - n_sigma * statistics.pstdev(values)
    expected = {t for t, v in enumerate(values) if v >= floor}
    assert draws(600, do_sample=True, top_n_sigma=n_sigma) == expected
    assert draws(600, do_sample=True, top_n_sigma=n_sigma, temperature=0.4) == expected  # scale-free


def test_top_n_sigma_ignores_masked_logits():
    logits = LOGITS.clone()[None]
    logits[0, 5:7] = float("-inf")
    finite = [v for v in logits[0].tolist() if v != -math.inf]
    floor = max(finite) - statistics.pstdev(finite)
    P.apply_top_n_sigma(logits, torch.tensor([1.0]))
    assert [t for t, v in enumerate(logits[0].tolist()) if v != -math.inf] == [
        t for t, v in enumerate(LOGITS.tolist()) if v >= floor and t not in (5, 6)
    ]


def test_off_values_and_greedy_rows_leave_the_logits_alone():
    batch = LOGITS.expand(300, -1).contiguous()
    off = TorchSampler().sample(batch, rows(300, do_sample=True, min_p=0.0, top_n_sigma=0.0)).token_ids
    assert torch.equal(off, TorchSampler().sample(batch, rows(300, do_sample=True)).token_ids)
    assert draws(10, min_p=0.9, top_n_sigma=0.1) == {0}  # greedy: truncation is for sampled rows
