"""`/v1/messages` and `/v1/messages/count_tokens` against the fake engine: bodies, the stream's events,
stop reasons, usage, the one service call, and the adapter a `model` names."""

from __future__ import annotations

import jsonschema
import pytest
from anthropic_schemas import MESSAGE, check_stream, parse_stream
from fastapi.testclient import TestClient

from fake_engine import REPLY, FakeEngine
from tgi.server.app import create_app
from tgi.server.service import InferenceService

ASK = {
    "model": "fake/model",
    "max_tokens": 5,
    "system": "Be brief.",
    "messages": [{"role": "user", "content": "Hi"}],
}
PROMPT = "<system>Be brief.<user>Hi<assistant>"


@pytest.fixture
def engine():
    return FakeEngine()


@pytest.fixture
def client(engine):
    with TestClient(create_app(engine)) as c:
        yield c


def test_message(client, engine):
    r = client.post(
        "/v1/messages", json={**ASK, "temperature": 0}, headers={"anthropic-version": "2023-06-01"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    jsonschema.validate(body, MESSAGE)
    assert body["content"] == [{"type": "text", "text": REPLY[:5]}] and body["model"] == "fake/model"
    assert (body["stop_reason"], body["stop_sequence"]) == ("max_tokens", None)
    assert body["usage"] == {"input_tokens": len(PROMPT), "output_tokens": 5, "cache_read_input_tokens": 0}
    ids, params = engine.requests[0]
    assert ids == [ord(c) for c in PROMPT] and params.is_greedy and params.max_new_tokens == 5


def test_stop_reasons_and_cached_tokens(client, engine):
    engine.cached_tokens = (4,)
    body = client.post("/v1/messages", json={**ASK, "max_tokens": 50}).json()
    assert (body["stop_reason"], body["content"][0]["text"]) == ("end_turn", REPLY)
    assert body["usage"] == {
        "input_tokens": len(PROMPT) - 4,
        "output_tokens": len(REPLY) + 1,
        "cache_read_input_tokens": 4,
    }
    body = client.post("/v1/messages", json={**ASK, "max_tokens": 50, "stop_sequences": ["x", "wor"]}).json()
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "wor")
    assert body["content"][0]["text"] == REPLY[: REPLY.index("wor")]


def test_stream(client):
    r = client.post("/v1/messages", json={**ASK, "max_tokens": 50, "stop_sequences": ["ld"], "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_stream(r.text)
    check_stream(events)
    assert (
        "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
        == REPLY[: REPLY.index("ld")]
    )
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "ld"}


def test_errors_before_the_headers_keep_their_status(client, engine):
    engine.fail_stream = 0
    r = client.post("/v1/messages", json={**ASK, "stream": True})
    assert r.status_code == 500 and r.json()["error"]["type"] == "api_error"
    r = client.post("/v1/messages", json={**ASK, "max_tokens": 500})  # past the fake's 128 total tokens
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_one_service_call_per_request(client, monkeypatch):
    calls = []
    generate = InferenceService.generate

    async def counted(self, *args, **kwargs):
        calls.append(kwargs.get("stream"))
        return await generate(self, *args, **kwargs)

    monkeypatch.setattr(InferenceService, "generate", counted)
    client.post("/v1/messages", json=ASK)
    client.post("/v1/messages", json={**ASK, "stream": True})
    assert calls == [False, True]


def test_count_tokens(client, engine):
    r = client.post("/v1/messages/count_tokens", json={k: v for k, v in ASK.items() if k != "max_tokens"})
    assert r.status_code == 200 and r.json() == {"input_tokens": len(PROMPT)}
    assert engine.requests == []  # counted, not generated


def test_model_names_an_adapter_or_is_404(engine):
    engine.model_info = engine.model_info.__class__(
        **{**engine.model_info.__dict__, "lora_adapters": ("ad",)}
    )
    with TestClient(create_app(engine)) as c:
        body = c.post("/v1/messages", json={**ASK, "model": "ad"}).json()
        assert body["model"] == "ad" and engine.requests[-1][1].adapter_id == "ad"
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            r = c.post(path, json={**ASK, "model": "nope"})
            assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
