"""vLLM's `use_beam_search` on OpenAI's routes against the fake engine (whose every step's alternatives are
"a", "b", "c", ... at log p -1, -2, -3, ...): `n` beams come back as `n` choices, best first, each step's
requests one token long; what would change nothing in the search is refused by name."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.server.app import create_app


@pytest.fixture
def engine():
    return FakeEngine()


def _post(engine, path, **body):
    with TestClient(create_app(engine)) as client:
        return client.post(path, json={"max_tokens": 3, "use_beam_search": True, **body})


def test_n_beams_come_back_best_first_as_n_choices(engine):
    r = _post(engine, "/v1/completions", prompt="Hi", n=2, temperature=0)
    assert r.status_code == 200, r.text
    # "aaa" scores -3; "aab" (-4) ties "aba" and "baa": the search keeps the first it meets
    assert [c["text"] for c in r.json()["choices"]] == ["aaa", "aab"]
    assert [c["index"] for c in r.json()["choices"]] == [0, 1]
    assert r.json()["usage"]["completion_tokens"] == 6
    assert all(params.max_new_tokens == 1 and params.top_n_tokens == 4 for _, params in engine.requests)


def test_chat_answers_its_beams(engine):
    r = _post(engine, "/v1/chat/completions", messages=[{"role": "user", "content": "Hi"}], n=3)
    assert r.status_code == 200, r.text
    texts = [c["message"]["content"] for c in r.json()["choices"]]
    assert texts[0] == "aaa" and len(set(texts)) == 3


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"temperature": 0.7}, "temperature"),
        ({"top_p": 0.5}, "top_p"),
        ({"min_p": 0.1}, "min_p"),
        ({"seed": 3}, "seed"),
        ({"stop": ["x"]}, "stop"),
        ({"logprobs": 1}, "logprobs"),
        ({"bad_words": ["x"]}, "bad_words"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"stream": True}, "stream"),
    ],
)
def test_what_would_change_nothing_in_the_search_is_refused_by_name(engine, extra, field):
    r = _post(engine, "/v1/completions", prompt="Hi", **extra)
    assert r.status_code == 422 and r.json()["error"]["param"] == field, r.text
    assert "use_beam_search" in r.json()["error"]["message"]
    assert engine.requests == []


def test_length_penalty_without_beam_search_is_refused(engine):
    with TestClient(create_app(engine)) as client:
        r = client.post("/v1/completions", json={"prompt": "Hi", "length_penalty": 0.5})
    assert r.status_code == 422 and r.json()["error"]["param"] == "length_penalty"
