"""`logit_bias` (OpenAI's): added to the named tokens' logits after the grammar mask and before the
penalties, in the vectorised sampler and the reference alike; validated by the engine's one validation."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from tgi.core.request import ValidationError
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.reference_sampler import reference_sample
from tgi.core.testing.sampling_cases import pack_token_masks, sampler_case
from tgi.core.validation import RequestLimits, validate_request


def _case(params: list[SamplingParams], vocab: int = 64):
    case = sampler_case(params, vocab_size=vocab, seed=21)
    return case, torch.tensor(case.logits)


def test_bias_forces_and_bans_tokens_greedy_and_seeded():
    plain = SamplingParams()
    case, logits = _case([plain, plain, SamplingParams(do_sample=True, seed=3)])
    best = logits.argmax(dim=1).tolist()
    biased = [
        SamplingParams(logit_bias=((11, 100.0),)),  # forced
        SamplingParams(logit_bias=((best[1], -100.0),)),  # its argmax banned
        SamplingParams(do_sample=True, seed=3, logit_bias=((7, 100.0),)),
    ]
    rows = [dataclasses.replace(r, sampling=p) for r, p in zip(case.rows, biased, strict=True)]
    out = TorchSampler().sample(logits, rows)
    ref = reference_sample(case.logits, rows)
    assert out.token_ids.tolist() == ref.token_ids
    assert out.token_ids[0] == 11 and out.token_ids[1] != best[1] and out.token_ids[2] == 7
    # the reported logprob is of the biased logits: a forced token is (nearly) certain
    assert out.logprobs[0].item() > -1e-6
    torch.testing.assert_close(out.logprobs.double(), torch.tensor(ref.logprobs, dtype=torch.float64))


def test_bias_leaves_other_rows_and_the_input_alone():
    case, logits = _case([SamplingParams(), SamplingParams(logit_bias=((1, 50.0),))])
    before = logits.clone()
    out = TorchSampler().sample(logits, case.rows)
    assert torch.equal(logits, before)
    assert out.token_ids[0] == before[0].argmax() and out.token_ids[1] == 1


def test_a_masked_token_stays_masked_whatever_its_bias():
    case, logits = _case([SamplingParams(logit_bias=((5, 100.0),))])
    masks = pack_token_masks((0,), [{2, 3}], 64)
    out = TorchSampler().sample(logits, case.rows, masks)
    assert out.token_ids.item() in (2, 3)
    assert out.token_ids.tolist() == reference_sample(case.logits, case.rows, masks).token_ids


def test_a_greedy_kernel_is_not_used_for_biased_rows():
    calls = []

    def kernel(x):
        calls.append(x)
        return x.argmax(dim=1), x.log_softmax(dim=1).max(dim=1).values

    case, logits = _case([SamplingParams(logit_bias=((9, 100.0),))])
    assert TorchSampler(greedy_kernel=kernel).sample(logits, case.rows).token_ids.item() == 9
    assert not calls


@pytest.mark.parametrize(
    ("bias", "message"),
    [
        (((1, 1.0), (1, 2.0)), "more than once"),
        (((1, 100.5),), ">= -100 and <= 100"),
        (((64, 1.0),), "token ids must be in [0, 64)"),
        (((-1, 1.0),), "token ids must be in [0, 64)"),
    ],
)
def test_invalid_biases_are_refused(bias, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        validate_request([1, 2], SamplingParams(max_new_tokens=4, logit_bias=bias), RequestLimits(10, 20, 64))


def test_the_bias_tensors_are_built_once_per_request_not_per_step(monkeypatch):
    bias = tuple((t, 1.5) for t in range(0, 600, 2))  # 300 pairs: the cap
    case, logits = _case([SamplingParams(logit_bias=bias), SamplingParams()], vocab=1024)
    built = []
    tensor = torch.tensor

    def counting(data, *args, **kwargs):
        if isinstance(data, list) and len(data) == len(bias):  # a tensor of the request's pairs
            built.append(len(data))
        return tensor(data, *args, **kwargs)

    monkeypatch.setattr(torch, "tensor", counting)
    sampler = TorchSampler()
    expected = reference_sample(case.logits, case.rows).token_ids
    for _ in range(5):  # five steps of the same request
        assert sampler.sample(logits, case.rows).token_ids.tolist() == expected
    assert len(built) == 2, "the ids and the values, once, at the request's first step"
    del case
    assert len(sampler.logit_bias) == 0, "a finished request's tensors go with its SamplingParams"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (SamplingParams(logit_bias=tuple((t, 1.0) for t in range(301))), "`logit_bias` may name at most 300"),
        (SamplingParams(stop_token_ids=tuple(range(301))), "`stop_token_ids` may hold at most 300"),
        (SamplingParams(stop_token_ids=(3, 64)), "`stop_token_ids` must be in [0, 64)"),
        (SamplingParams(stop_token_ids=(-1,)), "`stop_token_ids` must be in [0, 64)"),
    ],
)
def test_token_lists_past_their_cap_or_the_vocabulary_are_refused(params, message):
    params = dataclasses.replace(params, max_new_tokens=4)
    with pytest.raises(ValidationError, match=re.escape(message)):
        validate_request([1, 2], params, RequestLimits(10, 20, 64))
