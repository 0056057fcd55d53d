"""The watermark: the vectorised green lists equal the specification's, the sampler equals the reference on
watermarked rows, and the detector tells green-biased token streams from plain ones."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch

from tgi.core.interfaces.sampling import watermark_uniform
from tgi.core.sampling import processors as P
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.reference_sampler import reference_sample
from tgi.core.testing.sampling_cases import LOGPROB_TOLERANCE, SAMPLER_CASES, sampler_case
from tgi.core.watermark import Watermark, detect_tokens, is_green


def test_vectorised_green_lists_equal_the_specification():
    prev = [0, 1, 2, 31, 49151, 151_000, 2**31 - 1]
    gamma = [0.5, 0.25, 0.75, 0.5, 0.1, 0.9, 0.5]
    green = P.watermark_green(torch.tensor(prev), torch.tensor(gamma), 300)
    want = [[watermark_uniform(p, j) < g for j in range(300)] for p, g in zip(prev, gamma, strict=True)]
    assert green.tolist() == want
    # each token is green with probability gamma
    assert (
        abs(green[0].float().mean().item() - 0.5) < 0.1 and abs(green[1].float().mean().item() - 0.25) < 0.1
    )


def test_sampler_equals_the_reference_on_watermarked_rows():
    case = SAMPLER_CASES["watermarked"]()
    out = TorchSampler().sample(torch.tensor(case.logits), case.rows)
    ref = reference_sample(case.logits, case.rows)
    assert out.token_ids.tolist() == ref.token_ids
    assert out.logprobs.tolist() == pytest.approx(ref.logprobs, abs=LOGPROB_TOLERANCE)
    # the watermark changes what is chosen (else the case would test nothing)
    unmarked = [replace(r, sampling=replace(r.sampling, watermark=None)) for r in case.rows]
    assert reference_sample(case.logits, unmarked).token_ids != ref.token_ids


def test_rows_without_a_watermark_are_unchanged_beside_watermarked_ones():
    params = [SamplingParams(), SamplingParams(do_sample=True, seed=3), SamplingParams(watermark=Watermark())]
    case = sampler_case(params, 96, 11)
    alone = TorchSampler().sample(torch.tensor(case.logits[:2]), case.rows[:2])
    mixed = TorchSampler().sample(torch.tensor(case.logits), case.rows)
    assert mixed.token_ids[:2].tolist() == alone.token_ids.tolist()
    assert mixed.logprobs[:2].tolist() == alone.logprobs.tolist()


def test_out_of_range_watermarks_are_refused():
    for mark in (Watermark(0.0, 2.0), Watermark(1.0, 2.0), Watermark(0.5, 0.0)):
        with pytest.raises(ValueError, match="watermark"):
            SamplingParams(watermark=mark).validate()


def _stream(n: int, gamma: float, bias: float, rng: random.Random, vocab: int = 5000) -> list[int]:
    """`n` tokens where each next token is green with probability `bias` (plain text: `gamma`)."""
    tokens = [rng.randrange(vocab)]
    while len(tokens) < n:
        t = rng.randrange(vocab)
        if is_green(tokens[-1], t, gamma) == (rng.random() < bias):
            tokens.append(t)
    return tokens


def test_detector_separates_watermarked_from_plain_token_streams():
    rng = random.Random(0)
    for gamma in (0.25, 0.5):
        marked = detect_tokens(_stream(200, gamma, 0.9, rng), gamma)
        plain = detect_tokens([rng.randrange(5000) for _ in range(200)], gamma)
        assert marked.z_score > 4 and abs(plain.z_score) < 3, (marked, plain)
        assert marked.num_tokens_scored == 199 and marked.green_fraction > gamma


def test_repeated_pairs_count_once():
    loop = [5, 6, 7, 8] * 50
    once = detect_tokens(loop)
    assert once.num_tokens_scored == 4  # (5,6) (6,7) (7,8) (8,5)
    assert detect_tokens(loop, ignore_repeated_pairs=False).num_tokens_scored == 199
    assert detect_tokens([3]).z_score == 0.0 and detect_tokens([]).num_tokens_scored == 0
