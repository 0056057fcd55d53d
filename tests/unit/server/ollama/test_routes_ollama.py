"""Ollama's `/api/generate` and `/api/chat` against the fake engine: NDJSON lines and whole bodies, their
counts and durations, the prompt (templated or raw), options, refusals by name in Ollama's error shape, the
one service call, and the model a `model` names."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fake_engine import REPLY, CharTokenizer, FakeEngine, conversation_engine
from tgi.core.config import EngineConfig
from tgi.core.request import EngineError
from tgi.server.app import create_app
from tgi.server.service.inference import InferenceService
from tgi.server.service.settings import ServerSettings

MODEL = "fake/model"
CHAT = {
    "model": MODEL,
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
}
CHAT_PROMPT = "<system>Be brief.<user>Hi<assistant>"
GENERATE = {"model": MODEL, "prompt": "Hi", "system": "Be brief."}
STATS = {
    "done_reason", "total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
    "eval_duration",
}  # fmt: skip


@pytest.fixture
def engine():
    return FakeEngine()


@pytest.fixture
def client(engine):
    with TestClient(create_app(engine)) as c:
        yield c


def lines(response) -> list[dict]:
    assert response.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in response.text.splitlines()]


def test_generate_streams_ndjson_then_the_counts(client, engine):
    r = client.post("/api/generate", json={**GENERATE, "options": {"temperature": 0, "num_predict": 5}})
    assert r.status_code == 200, r.text
    out = lines(r)
    assert all(line["done"] is False and line["model"] == MODEL for line in out[:-1])
    assert "".join(line["response"] for line in out) == REPLY[:5]
    final = out[-1]
    assert final["done"] is True and set(final) >= STATS and final["response"] == ""
    assert final["done_reason"] == "length" and final["eval_count"] == 5 and final["load_duration"] == 0
    assert final["prompt_eval_count"] == len(CHAT_PROMPT)
    assert final["total_duration"] >= final["prompt_eval_duration"] + final["eval_duration"] - 1
    assert final["created_at"].endswith("Z")
    ids, params = engine.requests[0]
    assert ids == [ord(c) for c in CHAT_PROMPT] and params.is_greedy and params.max_new_tokens == 5


def test_generate_whole_body(client, engine):
    body = client.post("/api/generate", json={**GENERATE, "stream": False}).json()
    assert body["response"] == REPLY and body["done"] is True and body["done_reason"] == "stop"
    assert body["eval_count"] == len(REPLY) + 1 and body["prompt_eval_count"] == len(CHAT_PROMPT)
    params = engine.requests[0][1]
    # Ollama's documented defaults
    assert params.do_sample and (params.temperature, params.top_k, params.top_p) == (0.8, 40, 0.9)
    assert params.repetition_penalty == 1.0


def test_raw_generate_is_the_prompt_as_it_is(client, engine):
    body = client.post("/api/generate", json={"model": MODEL, "prompt": "Once", "raw": True, "stream": False})
    assert body.status_code == 200 and body.json()["response"] == REPLY
    assert engine.requests[0][0] == [ord(c) for c in "Once"]


def test_chat_streamed_equals_chat_whole(client, engine):
    out = lines(client.post("/api/chat", json=CHAT))
    assert all(line["message"]["role"] == "assistant" for line in out)
    whole = client.post("/api/chat", json={**CHAT, "stream": False}).json()
    assert "".join(line["message"]["content"] for line in out) == whole["message"]["content"] == REPLY
    assert out[-1]["done"] and whole["done"] and out[-1]["done_reason"] == whole["done_reason"] == "stop"
    assert engine.requests[0][0] == engine.requests[1][0] == [ord(c) for c in CHAT_PROMPT]


def test_one_service_call_per_request(client, monkeypatch):
    calls = []
    generate = InferenceService.generate

    async def counted(self, *args, **kwargs):
        calls.append(kwargs.get("stream"))
        return await generate(self, *args, **kwargs)

    monkeypatch.setattr(InferenceService, "generate", counted)
    client.post("/api/chat", json=CHAT)
    client.post("/api/generate", json={**GENERATE, "stream": False})
    assert len(calls) == 2


def test_an_empty_prompt_answers_that_the_model_is_loaded(client, engine):
    body = client.post("/api/generate", json={"model": MODEL}).json()
    assert body["done"] and body["done_reason"] == "load" and body["response"] == ""
    body = client.post("/api/chat", json={"model": MODEL, "messages": []}).json()
    assert body["done_reason"] == "load" and body["message"] == {"role": "assistant", "content": ""}
    assert engine.requests == []


@pytest.mark.parametrize("model", [MODEL, f"{MODEL}:latest"])
def test_the_served_name_with_or_without_its_tag(client, model):
    r = client.post("/api/chat", json={**CHAT, "model": model, "stream": False})
    assert r.status_code == 200 and r.json()["model"] == model


def test_an_unknown_model_is_404_naming_it_and_what_is_served(client, engine):
    for path, body in (("/api/chat", CHAT), ("/api/generate", GENERATE), ("/api/show", {})):
        r = client.post(path, json={**body, "model": "llama3:8b"})
        assert r.status_code == 404 and set(r.json()) == {"error"}, r.text
        assert "llama3:8b" in r.json()["error"] and f"{MODEL}:latest" in r.json()["error"]
    assert engine.requests == []


def test_adapters_are_models_too():
    engine = FakeEngine()
    engine.model_info = engine.model_info.__class__(
        **{**engine.model_info.__dict__, "lora_adapters": ("sql",)}
    )
    with TestClient(create_app(engine)) as client:
        r = client.post("/api/chat", json={**CHAT, "model": "sql:latest", "stream": False})
        names = [m["name"] for m in client.get("/api/tags").json()["models"]]
    assert r.status_code == 200 and engine.requests[0][1].adapter_id == "sql"
    assert names == [f"{MODEL}:latest", "sql:latest"]


def test_options_as_sampling_parameters(client, engine):
    options = {
        "temperature": 0.5, "top_k": 7, "top_p": 0.8, "min_p": 0.05, "typical_p": 0.9, "seed": 42,
        "num_predict": 3, "stop": ["wor"], "repeat_penalty": 1.2, "presence_penalty": 0.5,
        "frequency_penalty": 0.25, "repeat_last_n": -1, "num_ctx": 128, "mirostat": 0,
    }  # fmt: skip
    r = client.post("/api/generate", json={**GENERATE, "options": options, "stream": False})
    assert r.status_code == 200, r.text
    p = engine.requests[0][1]
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.typical_p, p.seed) == (0.5, 7, 0.8, 0.05, 0.9, 42)
    assert (p.max_new_tokens, p.stop, p.repetition_penalty) == (3, ("wor",), 1.2)
    assert (p.presence_penalty, p.frequency_penalty) == (0.5, 0.25)
    client.post(
        "/api/generate", json={**GENERATE, "options": {"num_predict": -1, "seed": -1}, "stream": False}
    )
    p = engine.requests[1][1]
    assert p.seed is None and p.max_new_tokens == 128 - len(CHAT_PROMPT)  # what is left of the context


def test_a_stop_sequence_ends_the_text_before_it(client):
    body = client.post(
        "/api/generate", json={**GENERATE, "options": {"stop": ["wor"]}, "stream": False}
    ).json()
    assert body["response"] == "Hello " and body["done_reason"] == "stop"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"num_gpu": 1}, "options.num_gpu"),
        ({"num_thread": 8}, "options.num_thread"),
        ({"num_ctx": 4096}, "options.num_ctx"),
        ({"num_batch": 7}, "options.num_batch"),
        ({"num_keep": 4}, "options.num_keep"),
        ({"mirostat": 2}, "options.mirostat"),
        ({"repeat_last_n": 64}, "options.repeat_last_n"),
        ({"repeat_last_n": 0, "repeat_penalty": 1.1}, "options.repeat_last_n"),
        ({"bogus_option": 1}, "options.bogus_option"),
        ({"temperature": "hot"}, "options.temperature"),
        ({"num_predict": 0}, "options.num_predict"),
    ],
)
def test_options_refused_by_name(client, engine, options, named):
    r = client.post("/api/generate", json={**GENERATE, "options": options})
    assert r.status_code == 400 and set(r.json()) == {"error"}, r.text
    assert f"`{named}`" in r.json()["error"]
    assert engine.requests == []


def test_load_time_options_at_the_servers_own_values_pass(client):
    options = {"num_ctx": 128, "num_batch": 256, "repeat_last_n": 0}
    assert client.post("/api/generate", json={**GENERATE, "options": options}).status_code == 200


@pytest.mark.parametrize("keep_alive", [-1, "-1", "-1m", "-1h30m", None])
def test_keep_alive_that_keeps_the_model_loaded(client, keep_alive):
    assert client.post("/api/chat", json={**CHAT, "keep_alive": keep_alive}).status_code == 200


@pytest.mark.parametrize("keep_alive", [0, "5m", 300, "0s", "soon"])
def test_keep_alive_that_would_unload_it_is_refused(client, keep_alive):
    r = client.post("/api/chat", json={**CHAT, "keep_alive": keep_alive})
    assert r.status_code == 400 and "`keep_alive`" in r.json()["error"]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"suffix": "end"}, "suffix"),
        ({"context": [1, 2, 3]}, "context"),
        ({"template": "{{ .Prompt }}"}, "template"),
        ({"logprobs": True}, "logprobs"),
        ({"raw": True}, "system"),  # GENERATE has a system prompt
        ({"images": ["iVBORw0KGgo="]}, "images[0]"),  # the fake takes no images
        ({"think": True}, "think"),  # no reasoning parser
        ({"format": "yaml"}, "format"),
        ({"format": {"type": "object"}}, "format"),  # the fake has no grammar masks
    ],
)
def test_generate_fields_refused_by_name(client, engine, fields, named):
    r = client.post("/api/generate", json={**GENERATE, **fields})
    assert r.status_code == 400 and set(r.json()) == {"error"}, r.text
    assert f"`{named}`" in r.json()["error"]
    assert engine.requests == []


def test_neutral_values_pass(client):
    fields = {"suffix": "", "context": [], "logprobs": False, "think": False, "format": ""}
    assert client.post("/api/generate", json={**GENERATE, **fields}).status_code == 200


def test_chat_images_on_a_model_without_vision_are_refused_by_name(client):
    messages = [{"role": "user", "content": "What is this?", "images": ["iVBORw0KGgo="]}]
    r = client.post("/api/chat", json={**CHAT, "messages": messages})
    assert r.status_code == 400 and "`messages[0].images[0]`" in r.json()["error"]


def test_chat_message_roles_and_tool_turns(engine):
    engine = conversation_engine()
    messages = [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_time", "arguments": {"tz": "CET"}}}]},
        {"role": "tool", "content": "12:00", "tool_name": "get_time"},
    ]  # fmt: skip
    with TestClient(create_app(engine)) as client:
        r = client.post("/api/chat", json={"model": MODEL, "messages": messages, "stream": False})
        bad = client.post("/api/chat", json={"model": MODEL, "messages": [{"role": "robot", "content": "x"}]})
    assert r.status_code == 200, r.text
    prompt = "".join(chr(i) for i in engine.requests[0][0])
    # the fake's template knows no `tool_calls`: the call is written as the JSON the model is asked for
    assert '{"name": "get_time", "arguments": {"tz": "CET"}}' in prompt and "<tool>12:00" in prompt
    assert bad.status_code == 400 and "`messages[0].role`" in bad.json()["error"]


def test_tools_and_format_together_are_refused(client):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    r = client.post("/api/chat", json={**CHAT, "tools": tools, "format": "json"})
    assert r.status_code == 400 and "`format`" in r.json()["error"]


def test_errors_before_the_stream_keep_their_status(client, engine):
    engine.fail_stream = 0
    r = client.post("/api/chat", json=CHAT)
    assert r.status_code == 500 and set(r.json()) == {"error"}
    r = client.post("/api/chat", json={**CHAT, "options": {"num_predict": 500}})  # past 128 total tokens
    assert r.status_code == 400 and set(r.json()) == {"error"}


def test_malformed_bodies_in_ollamas_shape(client):
    r = client.post("/api/chat", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and set(r.json()) == {"error"}
    r = client.post("/api/chat", json={"messages": []})  # no model
    assert r.status_code == 400 and "model" in r.json()["error"]


def test_a_full_server_is_ollamas_503():
    with TestClient(create_app(FakeEngine(), ServerSettings(max_concurrent_requests=0))) as client:
        r = client.post("/api/chat", json=CHAT)
    assert r.status_code == 503 and set(r.json()) == {"error"}


class FailsMidStream(FakeEngine):
    """Generates 3 tokens of the reply, then fails."""

    def _run(self, rid, prompt, params, fails, cached=0):
        tokens = super()._run(rid, prompt, params, fails, cached)

        async def some_then_fail():
            try:
                for _ in range(3):
                    yield await anext(tokens)
                raise EngineError("the engine failed while running this request")
            finally:
                await tokens.aclose()

        return some_then_fail()


def test_a_failure_mid_stream_is_the_last_line():
    with TestClient(create_app(FailsMidStream())) as client:
        r = client.post("/api/chat", json=CHAT)
        whole = client.post("/api/chat", json={**CHAT, "stream": False})
    out = lines(r)
    assert r.status_code == 200 and set(out[-1]) == {"error"} and "engine failed" in out[-1]["error"]
    assert "".join(line["message"]["content"] for line in out[:-1]) == REPLY[:3]
    assert whole.status_code == 500 and set(whole.json()) == {"error"}


class OpensThinking(CharTokenizer):
    """A template that opens the reasoning in its generation prompt and teaches Hermes tool calls."""

    chat_template = (
        "{{ tools }} <tool_call></tool_call> {% for m in messages %}{{ m.content }}{% endfor %}<think>"
    )

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **_):
        return super().apply_chat_template(messages, tokenize, add_generation_prompt) + "<think>\n"


TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}  # fmt: skip
CALL = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'


def _parsed(reply: str, **settings) -> tuple[TestClient, FakeEngine]:
    config = EngineConfig(
        model_id=MODEL, max_input_tokens=128, max_total_tokens=256, max_batch_prefill_tokens=256,
        max_batch_total_tokens=1024,
    )  # fmt: skip
    engine = FakeEngine(config=config, reply=reply, tokenizer=OpensThinking())
    return TestClient(create_app(engine, ServerSettings(**settings))), engine


def test_thinking_whole_and_streamed_with_a_reasoning_parser():
    client, _ = _parsed("Hm, 2 + 2 is 4.\n</think>\n\nIt is 4.", reasoning_parser="auto")
    ask = {**CHAT, "options": {"num_predict": 100}}
    with client:
        whole = client.post("/api/chat", json={**ask, "stream": False, "think": True}).json()
        out = lines(client.post("/api/chat", json=ask))
        generated = client.post("/api/generate", json={**GENERATE, "stream": False}).json()
        refused = client.post("/api/chat", json={**ask, "think": False})
    assert whole["message"]["thinking"] == "Hm, 2 + 2 is 4.\n" and whole["message"]["content"] == "It is 4."
    assert "".join(line["message"].get("thinking", "") for line in out) == "Hm, 2 + 2 is 4.\n"
    assert "".join(line["message"]["content"] for line in out) == "It is 4."
    assert generated["thinking"] == "Hm, 2 + 2 is 4.\n" and generated["response"] == "It is 4."
    assert refused.status_code == 400 and "`think`" in refused.json()["error"]


def test_the_models_own_tool_calls_in_ollamas_shape():
    client, engine = _parsed(
        f"I need the time.</think>Checking. {CALL}", reasoning_parser="deepseek_r1", tool_call_parser="hermes"
    )
    ask = {**CHAT, "options": {"num_predict": 200}, "tools": [TIME]}
    with client:
        whole = client.post("/api/chat", json={**ask, "stream": False}).json()
        out = lines(client.post("/api/chat", json=ask))
        caps = client.post("/api/show", json={"model": MODEL}).json()["capabilities"]
    assert engine.requests[0][1].grammar is None  # the model writes its own format, unconstrained
    call = {"function": {"index": 0, "name": "get_time", "arguments": {"tz": "CET"}}}
    assert whole["message"]["tool_calls"] == [call] and whole["message"]["content"].strip() == "Checking."
    streamed = [c for line in out for c in line["message"].get("tool_calls", ())]
    assert streamed == [call] and out[-1]["done"] and "tool_calls" not in out[-1]["message"]
    assert caps == ["completion", "tools", "thinking"]
