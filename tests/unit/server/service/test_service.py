"""Every generation route, streamed or not, goes to the engine through one service call
(`InferenceService.generate`), which validates each prompt once and samples its `n` sequences."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fake_engine import REPLY, FakeEngine
from tgi.server.app import create_app
from tgi.server.service.inference import InferenceService
from tgi.server.service.settings import ServerSettings

MSGS = [{"role": "user", "content": "Hi"}]
ROUTES = [
    ("/generate", {"inputs": "Hi", "parameters": {"max_new_tokens": 3}}, False),
    ("/generate_stream", {"inputs": "Hi", "parameters": {"max_new_tokens": 3}}, True),
    ("/", {"inputs": "Hi", "parameters": {"max_new_tokens": 3}, "stream": False}, False),
    ("/", {"inputs": "Hi", "parameters": {"max_new_tokens": 3}, "stream": True}, True),
    ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 3}, False),
    ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 3, "stream": True}, True),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 3}, False),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 3, "stream": True}, True),
    ("/invocations", {"messages": MSGS, "max_tokens": 3, "stream": True}, True),
    ("/invocations", {"prompt": "Hi", "max_tokens": 3}, False),
    ("/invocations", {"inputs": "Hi", "parameters": {"max_new_tokens": 3}}, False),
    ("/v1/responses", {"input": "Hi", "max_output_tokens": 3}, False),
    ("/v1/responses", {"input": "Hi", "max_output_tokens": 3, "stream": True}, True),
]


@pytest.fixture
def calls(monkeypatch) -> list[bool]:
    """The `stream` argument of every `InferenceService.generate` call (the real one runs)."""
    seen: list[bool] = []
    generate = InferenceService.generate

    async def recording(self, http, tracker, inputs, stream):
        seen.append(stream)
        return await generate(self, http, tracker, inputs, stream)

    monkeypatch.setattr(InferenceService, "generate", recording)
    return seen


@pytest.mark.parametrize(("path", "body", "stream"), ROUTES)
def test_every_generation_route_makes_one_service_call(path, body, stream, calls):
    engine = FakeEngine()
    with TestClient(create_app(engine, ServerSettings())) as client:
        r = client.post(path, json=body)
        assert r.status_code == 200, r.text
    assert calls == [stream]
    assert len(engine.requests) == 1 and engine.cancelled == []


def test_a_prompt_is_validated_once_for_all_its_sequences(monkeypatch):
    engine = FakeEngine()
    validated = []
    validate = engine.validate

    def counting(prompt_token_ids, params, images=(), prediction=()):
        validated.append(list(prompt_token_ids))
        return validate(prompt_token_ids, params, images, prediction)

    monkeypatch.setattr(engine, "validate", counting)
    body = {"prompt": ["Hi", "Yo"], "n": 3, "seed": 7, "max_tokens": 2}
    with TestClient(create_app(engine, ServerSettings(max_client_batch_size=6))) as client:
        r = client.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        assert [c["index"] for c in r.json()["choices"]] == list(range(6))
        assert all(c["text"] == REPLY[:2] for c in r.json()["choices"])
        best_of = {"inputs": "Hi", "parameters": {"best_of": 2, "do_sample": True, "max_new_tokens": 2}}
        assert client.post("/generate", json=best_of).status_code == 200
    hi, yo = [ord(c) for c in "Hi"], [ord(c) for c in "Yo"]
    assert validated == [hi, yo, hi]  # one validation per prompt, not per sequence
    # OpenAI's choices of one prompt sample with seed, seed + 1, ...
    assert [(ids, p.seed) for ids, p in engine.requests[:6]] == [
        (hi, 7), (hi, 8), (hi, 9), (yo, 7), (yo, 8), (yo, 9),
    ]  # fmt: skip
    assert len(engine.requests) == 8
