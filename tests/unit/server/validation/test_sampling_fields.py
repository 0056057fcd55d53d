"""vLLM's and llama.cpp's sampling fields on the OpenAI routes: each reaches the engine as its
`SamplingParams` field (against the fake engine, one token per character), their strings tokenized as their
peer tokenizes them (a byte tokenizer), and what the engine refuses is a 422 naming the field."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from reasoning_model import byte_tokenizer

from fake_engine import FakeEngine
from tgi.core.sampling_params import LogitsProcessorChoice, SamplingParams
from tgi.core.sampling_tokens import DEFAULT_DRY_SEQUENCE_BREAKERS, dry_sequence_breaker_ids
from tgi.server.app import create_app
from tgi.server.http.errors import ApiError
from tgi.server.service.settings import ServerSettings
from tgi.server.validation.sampling_fields import SamplingExtensions, sampling_fields, with_token_lists

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _post(engine: FakeEngine, route: str, body: dict):
    with TestClient(create_app(engine, ServerSettings())) as c:
        return c.post(route, json=body)


def test_each_field_reaches_the_engine():
    engine = FakeEngine()
    body = {
        "prompt": "abc", "max_tokens": 2, "temperature": 0.8, "min_p": 0.1, "typical_p": 0.9, "top_n_sigma": 1.5,
        "xtc_probability": 0.5, "xtc_threshold": 0.2, "allowed_token_ids": [97, 98], "bad_words": ["zz", "q"],
        "dry_multiplier": 0.0, "dry_base": 2.0, "dry_allowed_length": 3, "dry_penalty_last_n": 64,
    }  # fmt: skip
    r = _post(engine, "/v1/completions", body)
    assert r.status_code == 200, r.text
    p = engine.requests[-1][1]
    assert (p.min_p, p.typical_p, p.top_n_sigma, p.xtc_probability, p.xtc_threshold) == (
        0.1,
        0.9,
        1.5,
        0.5,
        0.2,
    )
    assert (p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n) == (2.0, 3, 64)
    assert p.allowed_token_ids == (97, 98)
    assert p.bad_words_ids == ((122, 122), (113,))  # one token a character: " zz" is longer, not added
    assert p.dry_sequence_breaker_ids == ()  # DRY is off: no breakers tokenized


def test_llama_cpp_s_negative_top_n_sigma_is_off():
    engine = FakeEngine()
    assert _post(engine, "/v1/chat/completions", {**CHAT, "top_n_sigma": -1.0}).status_code == 200
    assert engine.requests[-1][1].top_n_sigma == 0.0


@pytest.mark.parametrize(
    ("extra", "param_or_text"),
    [
        ({"min_p": 1.5}, "`min_p` must be >= 0.0 and <= 1.0"),
        ({"allowed_token_ids": [-1]}, "`allowed_token_ids` token ids must be in"),
        ({"bad_words": [" "]}, "`bad_words` must not hold empty or blank words"),
        ({"bad_words": ["x"] * 129}, "`bad_words` may hold at most 128 strings"),
        ({"logits_processors": ["no_such"]}, "'no_such' is not enabled on this server"),
        ({"logits_processors": [{"name": "p", "args": {"a": 1}}]}, "'p' is not enabled"),
    ],
)
def test_what_cannot_be_honoured_is_a_422_naming_the_field(extra, param_or_text):
    r = _post(FakeEngine(), "/v1/chat/completions", {**CHAT, **extra})
    assert r.status_code == 422 and param_or_text in r.json()["error"]["message"], r.text


def service_with(tokenizer) -> SimpleNamespace:
    return SimpleNamespace(engine=SimpleNamespace(tokenizer=tokenizer))


def test_dry_gets_llama_cpp_s_default_breakers_when_it_gives_none():
    tok = byte_tokenizer()
    req = SamplingExtensions(dry_multiplier=0.8)
    params = asyncio.run(with_token_lists(service_with(tok), req, SamplingParams(dry_multiplier=0.8)))
    assert params.dry_sequence_breaker_ids == dry_sequence_breaker_ids(tok, DEFAULT_DRY_SEQUENCE_BREAKERS)
    req = SamplingExtensions(dry_multiplier=0.8, dry_sequence_breakers=["ab"])
    params = asyncio.run(with_token_lists(service_with(tok), req, SamplingParams(dry_multiplier=0.8)))
    a, b = tok.encode("ab", add_special_tokens=False)
    assert params.dry_sequence_breaker_ids == ((a, b),)


def test_logits_processors_are_names_or_names_with_arguments():
    body = {"logits_processors": ["p", {"name": "q", "args": {"n": 2}}]}
    fields = sampling_fields(SamplingExtensions.model_validate(body))
    assert fields == {"logits_processors": (LogitsProcessorChoice("p"), LogitsProcessorChoice("q", {"n": 2}))}


def test_an_error_while_tokenizing_names_the_field():
    req = SamplingExtensions(dry_multiplier=0.8, dry_sequence_breakers=[""])
    with pytest.raises(ApiError, match="`dry_sequence_breakers` must not hold empty strings"):
        asyncio.run(with_token_lists(service_with(byte_tokenizer()), req, SamplingParams(dry_multiplier=0.8)))
