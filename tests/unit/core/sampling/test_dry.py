"""DRY (llama.cpp's "don't repeat yourself"): core's linear-time penalties and the sampler that applies them,
against a small independent implementation of the published definition (a token that would extend a repeat
of the context's end, of n >= allowed_length tokens that no sequence breaker cuts, loses
multiplier * base^(n - allowed_length)), on fixed histories and logits."""

from __future__ import annotations

import random

import pytest
import torch

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.sampling.dry import dry_penalties
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.reference_sampler import reference_sample


def published_dry(tokens, multiplier, base, allowed, breakers=(), last_n=-1) -> dict[int, float]:
    """The definition, written another way than core's: for every earlier occurrence of a token, the
    longest run before it that equals the context's end, where that end may not reach back into the
    last complete sequence breaker."""
    w = list(tokens if last_n < 0 else tokens[-last_n:]) if last_n else []
    n = len(w)
    ends = [s + len(b) - 1 for s in range(n) for b in breakers if w[s : s + len(b)] == list(b)]
    floor = max(ends, default=-1) + 1  # the repeated end starts at or after this position
    alone = {b[0] for b in breakers if len(b) == 1}
    longest: dict[int, int] = {}
    for p in range(1, n):
        k = 0
        while k < p and n - 1 - k >= floor and w[p - 1 - k] == w[n - 1 - k]:
            k += 1
        if k >= allowed and w[p] not in alone:
            longest[w[p]] = max(longest.get(w[p], 0), k)
    return {t: multiplier * base ** (k - allowed) for t, k in longest.items()}


def dry(**kw) -> SamplingParams:
    return SamplingParams(**{"dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, **kw})


def test_llama_cpp_worked_example():
    # llama.cpp's comment: "a b c c b c y a b c": the end "a b c" also stands before the second c (3
    # tokens), "b c" before y (2), "c" before b (1, under allowed_length 2)
    a, b, c, y = 1, 2, 3, 4
    got = dry_penalties([a, b, c, c, b, c, y, a, b, c], dry())
    assert got == pytest.approx({c: 0.8 * 1.75, y: 0.8})


@pytest.mark.parametrize(
    ("tokens", "kw"),
    [
        ([10, 11, 12, 13, 10, 11, 12], {}),
        ([20, 21, 22] * 5 + [20, 21], {}),
        ([5, 6] * 8, {"dry_allowed_length": 1}),
        ([10, 11, 12, 13, 10, 11, 12], {"dry_sequence_breaker_ids": ((11,),)}),
        ([10, 11, 12, 13, 50, 10, 11, 12], {"dry_sequence_breaker_ids": ((50,),)}),
        ([10, 11, 12, 13, 10, 11, 12], {"dry_sequence_breaker_ids": ((11, 12),)}),
        ([1, 2, 9, 1, 2], {"dry_sequence_breaker_ids": ((9,), (3, 4))}),
        ([30, 31, 32, 33, 34, 30, 31, 32], {"dry_penalty_last_n": 4}),
        ([30, 31, 32, 33, 30, 31, 32], {"dry_penalty_last_n": 0}),
        ([40, 41, 42, 43, 40, 41, 42, 44, 40, 41, 42], {"dry_allowed_length": 3}),
        ([7, 7, 7, 7, 7, 7], {}),
        ([1, 2], {}),
    ],
)
def test_penalties_equal_the_published_definition(tokens, kw):
    params = dry(**kw)
    expected = published_dry(
        tokens,
        0.8,
        1.75,
        params.dry_allowed_length,
        params.dry_sequence_breaker_ids,
        params.dry_penalty_last_n,
    )
    assert dry_penalties(tokens, params) == pytest.approx(expected)


def test_random_histories_equal_the_published_definition():
    rng = random.Random(0)
    for _ in range(300):
        tokens = [rng.randrange(4) for _ in range(rng.randrange(1, 40))]
        breakers = rng.choice([(), ((3,),), ((2, 3),)])
        allowed, last_n = rng.randrange(1, 4), rng.choice([-1, 5, 12])
        params = dry(dry_allowed_length=allowed, dry_sequence_breaker_ids=breakers, dry_penalty_last_n=last_n)
        expected = published_dry(tokens, 0.8, 1.75, allowed, breakers, last_n)
        assert dry_penalties(tokens, params) == pytest.approx(expected), (tokens, breakers, allowed, last_n)


def test_the_exponent_is_capped_as_llama_cpp_caps_it():
    # base 1e30: float32 holds base^2 no more, so the exponent stops at floor(88.72 / ln 1e30) = 1
    params = SamplingParams(dry_multiplier=1.0, dry_base=1e30, dry_allowed_length=1)
    assert dry_penalties([5, 6] * 8, params) == pytest.approx({5: 1e30})


def test_off_without_a_multiplier():
    assert dry_penalties([1, 2, 1, 2, 1], SamplingParams()) == {}


def row(tokens, prompt, params) -> ScheduledSequence:
    return ScheduledSequence("r", [tokens[-1]], len(tokens) - 1, [0], False, True, params, 0, prompt, tokens)


def test_the_sampler_subtracts_them_from_fixed_logits():
    a, b, c, y = 1, 2, 3, 4
    history = [a, b, c, c, b, c, y, a, b, c]
    logits = torch.tensor([[0.0, 0.5, 0.2, 2.0, 1.5, -1.0]])  # c is the most likely, y second
    params = dry()
    out = TorchSampler().sample(logits, [row(history, 4, params)])
    expected = logits[0].clone()
    expected[c] -= 0.8 * 1.75
    expected[y] -= 0.8
    assert out.token_ids.tolist() == [y]  # c falls to 2.0 - 1.4 = 0.6, below y's 1.5 - 0.8 = 0.7
    assert float(out.logprobs[0]) == pytest.approx(float(expected.log_softmax(0)[y]), abs=1e-6)
    ref = reference_sample(logits, [row(history, 4, params)])
    assert ref.token_ids == [y]


def test_greedy_rows_keep_their_token_without_dry_beside_rows_with_it():
    history = [10, 11, 12, 13, 10, 11, 12]
    logits = torch.zeros(2, 20)
    logits[:, 13] = 1.0
    plain, with_dry = SamplingParams(), SamplingParams(dry_multiplier=5.0)
    out = TorchSampler().sample(logits, [row(history, 3, plain), row(history, 3, with_dry)])
    assert out.token_ids.tolist()[0] == 13 and out.token_ids.tolist()[1] != 13
