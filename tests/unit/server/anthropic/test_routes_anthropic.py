"""`/v1/messages` and `/v1/messages/count_tokens` against the fake engine: bodies, the stream's events,
stop reasons, usage, the one service call, and the adapter a `model` names."""

from __future__ import annotations

import json

import jsonschema
import pytest
from anthropic_schemas import MESSAGE, check_stream, parse_stream
from fastapi.testclient import TestClient

from fake_engine import REPLY, CharTokenizer, FakeEngine
from tgi.core.config import EngineConfig
from tgi.server.app import create_app
from tgi.server.service.inference import InferenceService
from tgi.server.service.settings import ServerSettings

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


def test_a_prefill_is_continued_and_the_reply_holds_only_what_follows(client, engine):
    ask = {**ASK, "messages": [*ASK["messages"], {"role": "assistant", "content": "Well,"}]}
    prompt = "<system>Be brief.<user>Hi<assistant>Well,"  # the turn left open: no new one after it
    body = client.post("/v1/messages", json=ask).json()
    assert body["content"] == [{"type": "text", "text": REPLY[:5]}]
    assert engine.requests[-1][0] == [ord(c) for c in prompt]
    events = parse_stream(client.post("/v1/messages", json={**ask, "stream": True}).text)
    check_stream(events)
    assert "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta") == REPLY[:5]
    counted = client.post(
        "/v1/messages/count_tokens", json={k: v for k, v in ask.items() if k != "max_tokens"}
    )
    assert counted.json() == {"input_tokens": len(prompt)}
    r = client.post(
        "/v1/messages", json={**ask, "messages": [*ASK["messages"], {"role": "assistant", "content": "Hm "}]}
    )
    assert r.status_code == 400 and "trailing whitespace" in r.json()["error"]["message"]


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


class OpensThinking(CharTokenizer):
    """A template that opens the reasoning in its generation prompt (DeepSeek-R1's way) and teaches Hermes
    tool calls."""

    chat_template = (
        "{{ tools }} <tool_call></tool_call> {% for m in messages %}{{ m.content }}{% endfor %}<think>"
    )

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **_):
        return super().apply_chat_template(messages, tokenize, add_generation_prompt) + "<think>\n"


TIME = {"name": "get_time", "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}}}
CALL = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'


def _parsed(reply: str, **settings) -> tuple[TestClient, FakeEngine]:
    config = EngineConfig(
        model_id="fake/model",
        max_input_tokens=128,
        max_total_tokens=256,
        max_batch_prefill_tokens=256,
        max_batch_total_tokens=1024,
    )
    engine = FakeEngine(config=config, reply=reply, tokenizer=OpensThinking())
    return TestClient(create_app(engine, ServerSettings(**settings))), engine


def _blocks(events: list[tuple[str, dict]]) -> list[dict]:
    """The content blocks a stream built (each block's deltas joined)."""
    blocks: list[dict] = []
    for name, data in events:
        if name == "content_block_start":
            blocks.append(dict(data["content_block"]))
        elif name == "content_block_delta":
            delta, block = data["delta"], blocks[-1]
            key = {"thinking_delta": "thinking", "text_delta": "text", "input_json_delta": "partial_json"}[
                delta["type"]
            ]
            block[key] = block.get(key, "") + delta[key]
    return blocks


def test_reasoning_as_thinking_blocks_whole_and_streamed():
    client, _ = _parsed("Hm, 2 + 2 is 4.\n</think>\n\nIt is 4.", reasoning_parser="auto")
    ask = {**ASK, "max_tokens": 100}
    with client:
        body = client.post("/v1/messages", json=ask).json()
        events = parse_stream(client.post("/v1/messages", json={**ask, "stream": True}).text)
        adaptive = client.post("/v1/messages", json={**ask, "thinking": {"type": "adaptive"}})
        budget = client.post(
            "/v1/messages", json={**ask, "thinking": {"type": "enabled", "budget_tokens": 1024}}
        )
    jsonschema.validate(body, MESSAGE)
    assert body["content"] == [
        {"type": "thinking", "thinking": "Hm, 2 + 2 is 4.\n", "signature": ""},
        {"type": "text", "text": "It is 4."},
    ]
    check_stream(events)
    assert _blocks(events) == [
        {"type": "thinking", "thinking": "Hm, 2 + 2 is 4.\n", "signature": ""},
        {"type": "text", "text": "It is 4."},
    ]
    assert adaptive.status_code == 200
    assert budget.status_code == 400 and "`thinking`" in budget.json()["error"]["message"]


def test_the_models_own_tool_calls_as_tool_use_blocks():
    client, engine = _parsed(
        f"I need the time.</think>Checking. {CALL}", reasoning_parser="deepseek_r1", tool_call_parser="hermes"
    )
    ask = {**ASK, "max_tokens": 200, "tools": [TIME]}
    with client:
        body = client.post("/v1/messages", json=ask).json()
        events = parse_stream(client.post("/v1/messages", json={**ask, "stream": True}).text)
    assert engine.requests[0][1].grammar is None  # the model writes its own format, unconstrained
    jsonschema.validate(body, MESSAGE)
    assert body["stop_reason"] == "tool_use"
    thinking, text, call = body["content"]
    assert thinking["thinking"] == "I need the time." and text == {"type": "text", "text": "Checking."}
    assert (call["type"], call["name"], call["input"]) == ("tool_use", "get_time", {"tz": "CET"})
    check_stream(events)
    streamed = _blocks(events)
    assert [b["type"] for b in streamed] == ["thinking", "text", "tool_use"]
    assert json.loads(streamed[2]["partial_json"]) == {"tz": "CET"} and streamed[2]["name"] == "get_time"
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
