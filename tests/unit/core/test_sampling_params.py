"""The later sampling parameters (min-p, top-n-sigma, DRY, XTC, bad words, allowed tokens, logits processors):
their ranges refused by name, their token ids checked against the vocabulary, a backend that cannot honour
one refusing it by name, and every field crossing to the other ranks of a group."""

from __future__ import annotations

import dataclasses

import pytest

from tgi.core.interfaces import RunnerCapabilities
from tgi.core.parallel import wire
from tgi.core.request import ValidationError
from tgi.core.sampling_params import LogitsProcessorChoice, SamplingParams
from tgi.core.step_overlap import reads_token_history
from tgi.core.validation import RequestLimits, check_runner_features, validate_request


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"min_p": 1.5}, "`min_p` must be >= 0.0 and <= 1.0"),
        ({"min_p": -0.1}, "`min_p` must be >= 0.0 and <= 1.0"),
        ({"min_p": float("nan")}, "`min_p` must be a finite number"),
        ({"top_n_sigma": -1.0}, "`top_n_sigma` must be >= 0.0"),
        ({"dry_multiplier": -0.5}, "`dry_multiplier` must be >= 0.0"),
        ({"dry_base": 0.9}, "`dry_base` must be >= 1.0"),
        ({"dry_base": float("inf")}, "`dry_base` must be a finite number"),
        ({"dry_allowed_length": 0}, "`dry_allowed_length` must be >= 1"),
        ({"dry_penalty_last_n": -2}, "`dry_penalty_last_n` must be >= -1"),
        ({"dry_sequence_breaker_ids": ((),)}, "`dry_sequence_breakers` token sequences must hold 1 to 21"),
        ({"dry_sequence_breaker_ids": (tuple(range(22)),)}, "`dry_sequence_breakers` token sequences"),
        ({"xtc_probability": 2.0}, "`xtc_probability` must be >= 0.0 and <= 1.0"),
        ({"xtc_threshold": -0.1}, "`xtc_threshold` must be >= 0.0 and <= 1.0"),
        ({"bad_words_ids": ((),)}, "`bad_words` must not be empty"),
        ({"bad_words_ids": ((1,),) * 129}, "`bad_words` may make at most 128 token sequences. Given: 129"),
        ({"bad_words_ids": (tuple(range(600)), tuple(range(600)))}, "at most 1024 tokens in all"),
        ({"allowed_token_ids": ()}, "`allowed_token_ids` must not be empty"),
        ({"logits_processors": (LogitsProcessorChoice(""),)}, "`logits_processors` names must not be empty"),
        ({"logits_processors": (LogitsProcessorChoice("a"),) * 17}, "at most 16 processors"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SamplingParams(**kw).validate()


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"allowed_token_ids": (3, 100)}, "allowed_token_ids"),
        ({"bad_words_ids": ((3,), (1, -1))}, "bad_words"),
        ({"dry_multiplier": 1.0, "dry_sequence_breaker_ids": ((5, 100),)}, "dry_sequence_breakers"),
    ],
)
def test_token_ids_outside_the_vocabulary_are_refused_naming_the_field(kw, field):
    with pytest.raises(ValidationError, match=rf"`{field}` token ids must be in \[0, 100\)"):
        validate_request([1, 2], SamplingParams(max_new_tokens=4, **kw), RequestLimits(16, 32, 100))


def test_a_backend_that_cannot_honour_a_parameter_refuses_it_by_name():
    features = RunnerCapabilities(unsupported_sampling=frozenset({"logits_processors", "bad_words_ids"}))
    check_runner_features(SamplingParams(min_p=0.2), features, "mychip")  # honoured: accepted
    with pytest.raises(ValidationError, match="the mychip backend's sampler does not support `bad_words`"):
        check_runner_features(SamplingParams(bad_words_ids=((4,),)), features, "mychip")
    with pytest.raises(ValidationError, match="does not support `logits_processors`"):
        check_runner_features(
            SamplingParams(logits_processors=(LogitsProcessorChoice("x"),)), features, "mychip"
        )


def test_every_field_crosses_to_the_other_ranks():
    params = SamplingParams(
        do_sample=True,
        min_p=0.1,
        top_n_sigma=1.5,
        dry_multiplier=0.8,
        dry_base=1.5,
        dry_allowed_length=3,
        dry_penalty_last_n=64,
        dry_sequence_breaker_ids=((4,), (5, 6, 7)),
        xtc_probability=0.5,
        xtc_threshold=0.2,
        bad_words_ids=((1,), (2, 3)),
        allowed_token_ids=(1, 2, 3),
        logits_processors=(LogitsProcessorChoice("p", {"n": [1, 2], "s": "x"}),),
    )
    data = wire.loads(wire.dumps(wire.to_data(params)), "params")
    back = wire.from_data(SamplingParams, data, "params")
    assert back == params
    assert back.dry_breakers == {4: ((),), 5: ((6, 7),)}


def test_what_reads_the_token_history_waits_for_the_step_before():
    assert not reads_token_history(SamplingParams(min_p=0.3, top_n_sigma=1.0, xtc_probability=1.0))
    assert not reads_token_history(SamplingParams(allowed_token_ids=(1, 2)))
    for kw in (
        {"dry_multiplier": 0.8},
        {"bad_words_ids": ((1, 2),)},
        {"logits_processors": (LogitsProcessorChoice("p"),)},
    ):
        assert reads_token_history(SamplingParams(**kw)), kw


def test_cached_breakers_are_not_pickled():
    params = SamplingParams(dry_sequence_breaker_ids=((4,),))
    assert params.dry_breakers == {4: ((),)}
    assert "dry_breakers" not in params.__getstate__()
    assert dataclasses.replace(params).dry_breakers == {4: ((),)}
