"""TGI routes against the fake engine: bodies, SSE framing, / dispatch, tokenize, info, health, docs."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fake_engine import REPLY, FakeEngine
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings


@pytest.fixture
def engine():
    return FakeEngine()


@pytest.fixture
def client(engine):
    with TestClient(create_app(engine, ServerSettings(enable_prefill_logprobs=True))) as c:
        yield c


def sse_events(text: str) -> list[dict]:
    assert text.endswith("\n\n")
    chunks = text.split("\n\n")[:-1]
    assert all(c.startswith("data: ") for c in chunks), chunks
    return [json.loads(c[len("data: ") :]) for c in chunks]


def test_generate_greedy_with_details(client, engine):
    r = client.post("/generate", json={"inputs": "Hi", "parameters": {"max_new_tokens": 5, "details": True}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["generated_text"] == REPLY[:5]
    d = body["details"]
    assert d["finish_reason"] == "length" and d["generated_tokens"] == 5 and d["prefill"] == []
    assert [t["text"] for t in d["tokens"]] == list(REPLY[:5])
    assert all(t["logprob"] == -0.5 and t["special"] is False for t in d["tokens"])
    assert int(r.headers["x-prompt-tokens"]) == 2 and int(r.headers["x-generated-tokens"]) == 5
    ids, params = engine.requests[0]
    assert ids == [ord("H"), ord("i")] and params.is_greedy and params.max_new_tokens == 5


def test_generate_without_details_has_no_details_key(client):
    body = client.post("/generate", json={"inputs": "Hi", "parameters": {"max_new_tokens": 3}}).json()
    assert body == {"generated_text": REPLY[:3]}


def test_default_max_new_tokens_is_what_is_left_of_max_total(client, engine):
    r = client.post("/generate", json={"inputs": "abcd"})
    assert r.status_code == 200
    assert engine.requests[0][1].max_new_tokens == engine.config.max_total_tokens - 4
    assert r.json()["generated_text"] == REPLY  # then EOS


def test_eos_stop_sequence_full_text_prefill_and_top_tokens(client, engine):
    r = client.post(
        "/generate",
        json={
            "inputs": "Q:",
            "parameters": {
                "max_new_tokens": 50,
                "details": True,
                "stop": ["wor"],
                "return_full_text": True,
                "decoder_input_details": True,
                "top_n_tokens": 2,
            },
        },
    )
    body = r.json()
    assert body["generated_text"] == "Q:Hello wor"  # TGI keeps the matched stop sequence
    assert engine.requests[0][1].include_stop_str_in_output
    assert body["details"]["finish_reason"] == "stop_sequence"
    assert [p["text"] for p in body["details"]["prefill"]] == ["Q", ":"]
    assert body["details"]["prefill"][0]["logprob"] is None
    assert all(len(t) == 2 for t in body["details"]["top_tokens"])


def test_best_of_returns_other_sequences(client, engine):
    r = client.post(
        "/generate",
        json={
            "inputs": "x",
            "parameters": {"max_new_tokens": 3, "best_of": 2, "do_sample": True, "details": True},
        },
    )
    assert r.status_code == 200, r.text
    assert len(r.json()["details"]["best_of_sequences"]) == 1
    assert len(engine.requests) == 2


def test_generate_stream_framing(client):
    r = client.post(
        "/generate_stream", json={"inputs": "Hi", "parameters": {"max_new_tokens": 4, "details": True}}
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert [e["index"] for e in events] == [1, 2, 3, 4]
    assert "".join(e["token"]["text"] for e in events) == REPLY[:4]
    assert all(e["generated_text"] is None and e["details"] is None for e in events[:-1])
    assert events[-1]["generated_text"] == REPLY[:4]
    assert events[-1]["details"] == {
        "finish_reason": "length",
        "generated_tokens": 4,
        "seed": None,
        "input_length": 2,
    }


def test_stream_eos_token_is_special(client):
    events = sse_events(
        client.post("/generate_stream", json={"inputs": "Hi", "parameters": {"max_new_tokens": 40}}).text
    )
    last = events[-1]
    assert last["token"]["special"] is True and last["token"]["text"] == "</s>"
    assert last["generated_text"] == REPLY and last["details"] is None


def test_compat_route_dispatches_on_stream(client):
    r = client.post("/", json={"inputs": "Hi", "parameters": {"max_new_tokens": 2}})
    assert r.json() == [{"generated_text": REPLY[:2]}]
    r = client.post("/", json={"inputs": "Hi", "parameters": {"max_new_tokens": 2}, "stream": True})
    assert sse_events(r.text)[-1]["generated_text"] == REPLY[:2]


def test_tokenize(client):
    r = client.post("/tokenize", json={"inputs": "ab"})
    assert r.json() == [
        {"id": 97, "text": "a", "start": 0, "stop": 1},
        {"id": 98, "text": "b", "start": 1, "stop": 2},
    ]


def test_info_health_docs(client, engine):
    info = client.get("/info").json()
    assert info["model_id"] == "fake/model"
    assert info["max_input_tokens"] == 64 and info["max_total_tokens"] == 128
    assert info["max_concurrent_requests"] == 128 and info["max_best_of"] == 2
    assert info["max_stop_sequences"] == 4 and info["max_top_n_tokens"] == 5
    assert info["prefix_caching"] is True  # the default
    assert info["kv_cache_dtype"] == "auto" and info["max_batch_total_tokens"] == 1024  # stored as, tokens
    assert client.get("/health").status_code == 200
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/generate", "/generate_stream", "/", "/v1/chat/completions", "/v1/completions"} <= set(paths)
    engine.healthy = False
    assert client.get("/health").status_code == 503


def test_lifespan_starts_and_stops_engine(engine):
    with TestClient(create_app(engine)):
        assert engine.started
    assert not engine.started
