"""The rest of TGI's and OpenAI's surface against the fake engine (issue 23): `logit_bias` parsed into the
sampling parameters, `echo` on completions, prompt logprobs behind `--enable-prefill-logprobs`,
`/invocations` dispatched by the body's shape, `/chat_tokenize`, CORS and the validation workers."""

from __future__ import annotations

import json
import threading

import pytest
from fastapi.testclient import TestClient

from fake_engine import REPLY, FakeEngine
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

MSGS = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def engine():
    return FakeEngine()


def client_of(engine, **settings) -> TestClient:
    return TestClient(create_app(engine, ServerSettings(**settings)))


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_logit_bias_becomes_sorted_token_pairs(engine, path):
    body = {"messages": MSGS} if "chat" in path else {"prompt": "Hi"}
    with client_of(engine) as c:
        r = c.post(path, json={**body, "max_tokens": 2, "logit_bias": {"72": 5, "10": -100.0}})
        assert r.status_code == 200, r.text
    assert engine.requests[0][1].logit_bias == ((10, -100.0), (72, 5.0))


@pytest.mark.parametrize(
    ("bias", "message"),
    [
        ({"x": 1}, "`logit_bias` keys must be token ids"),
        ({"1": 101}, "`logit_bias` values must be >= -100 and <= 100"),
        ({"2000000": 1}, "`logit_bias` token ids must be in [0,"),
    ],
)
def test_invalid_logit_bias_is_a_422_in_openai_shape(engine, bias, message):
    with client_of(engine) as c:
        r = c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "logit_bias": bias})
    assert r.status_code == 422, r.text
    assert message in r.json()["error"]["message"]


def test_echo_prepends_the_prompt_text_and_tokens(engine):
    with client_of(engine) as c:
        r = c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 3, "echo": True, "n": 2})
        assert r.status_code == 200, r.text
        assert [ch["text"] for ch in r.json()["choices"]] == ["Hi" + REPLY[:3]] * 2
        ids = c.post("/v1/completions", json={"prompt": [72, 105], "max_tokens": 2, "echo": True})
        assert ids.json()["choices"][0]["text"] == "Hi" + REPLY[:2]  # token ids echoed as their text


def test_streamed_echo_sends_the_prompt_first(engine):
    with client_of(engine) as c:
        r = c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 3, "echo": True, "stream": True})
    parts = [json.loads(p[6:]) for p in r.text.split("\n\n") if p.startswith("data: {")]
    texts = [p["choices"][0]["text"] for p in parts]
    assert texts[0] == "Hi" and "".join(texts) == "Hi" + REPLY[:3]


def test_echo_with_logprobs_needs_prefill_logprobs(engine):
    body = {"prompt": "Hi", "max_tokens": 2, "echo": True, "logprobs": 1}
    with client_of(engine) as c:
        r = c.post("/v1/completions", json=body)
    assert r.status_code == 422 and r.json()["error"]["param"] == "echo"
    assert "--enable-prefill-logprobs" in r.json()["error"]["message"]
    with client_of(engine, enable_prefill_logprobs=True) as c:
        lp = c.post("/v1/completions", json=body).json()["choices"][0]["logprobs"]
        streamed = c.post("/v1/completions", json={**body, "stream": True})
    assert lp["tokens"][:2] == ["H", "i"] and lp["token_logprobs"][0] is None
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == 4
    assert lp["text_offset"] == [0, 1, 2, 3] and lp["top_logprobs"][0] is None
    assert streamed.status_code == 422 and "when streaming" in streamed.json()["error"]["message"]


def test_decoder_input_details_needs_prefill_logprobs(engine):
    body = {
        "inputs": "Hi",
        "parameters": {"max_new_tokens": 2, "details": True, "decoder_input_details": True},
    }
    with client_of(engine) as c:
        r = c.post("/generate", json=body)
    assert r.status_code == 422 and r.json()["error_type"] == "validation"
    assert "`decoder_input_details`" in r.json()["error"] and "--enable-prefill-logprobs" in r.json()["error"]
    with client_of(engine, enable_prefill_logprobs=True) as c:
        prefill = c.post("/generate", json=body).json()["details"]["prefill"]
    assert [t["text"] for t in prefill] == ["H", "i"]


def test_invocations_dispatch_by_body_shape(engine):
    with client_of(engine) as c:
        chat = c.post("/invocations", json={"messages": MSGS, "max_tokens": 3})
        completion = c.post("/invocations", json={"prompt": "Hi", "max_tokens": 3})
        generate = c.post("/invocations", json={"inputs": "Hi", "parameters": {"max_new_tokens": 3}})
        stream = c.post(
            "/invocations", json={"inputs": "Hi", "parameters": {"max_new_tokens": 2}, "stream": True}
        )
        bad = c.post("/invocations", json={"inputs": "Hi", "parameters": {"max_new_tokens": "3"}})
        unknown = c.post(
            "/invocations", json={"prompt": "Hi", "logit_bias": {"1": 1}, "prediction": {"x": 1}}
        )
    assert chat.json()["object"] == "chat.completion"
    assert chat.json()["choices"][0]["message"]["content"] == REPLY[:3]
    assert completion.json()["object"] == "text_completion"
    assert generate.json() == [{"generated_text": REPLY[:3]}]
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert bad.status_code == 422 and "max_new_tokens" in bad.json()["error"]
    assert unknown.status_code == 422 and "`prediction`" in unknown.json()["error"]


def test_chat_tokenize_gives_the_templated_text_and_its_tokens(engine):
    with client_of(engine) as c:
        body = c.post("/chat_tokenize", json={"messages": MSGS}).json()
        refused = c.post("/chat_tokenize", json={"messages": MSGS, "prediction": {"x": 1}})
    text = "<user>Hi<assistant>"
    assert body["templated_text"] == text
    assert [t["id"] for t in body["tokenize_response"]] == [ord(ch) for ch in text]
    assert all(text[t["start"] : t["stop"]] == t["text"] for t in body["tokenize_response"])
    assert refused.status_code == 422 and engine.requests == []


def test_cors_only_for_the_allowed_origins(engine):
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    with client_of(engine, cors_allow_origin=("https://app.example",), api_key="k") as c:
        ok = c.options("/generate", headers=preflight)
        other = c.options("/generate", headers={**preflight, "Origin": "https://evil.example"})
    with client_of(engine) as c:
        off = c.get("/health", headers={"Origin": "https://app.example"})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "https://app.example"
    assert "access-control-allow-origin" not in other.headers
    assert "access-control-allow-origin" not in off.headers


def test_tokenization_runs_on_the_validation_workers(engine):
    seen = set()
    encode = engine.tokenizer.encode

    def recording(*args, **kwargs):
        seen.add(threading.current_thread().name)
        return encode(*args, **kwargs)

    engine.tokenizer.encode = recording
    with client_of(engine, validation_workers=1) as c:
        for _ in range(3):
            assert (
                c.post("/generate", json={"inputs": "Hi", "parameters": {"max_new_tokens": 1}}).status_code
                == 200
            )
    assert len(seen) == 1 and next(iter(seen)).startswith("tgi-validation")


def test_ping_answers_like_health_without_the_key(engine):
    with client_of(engine, api_key="k") as c:
        assert c.get("/ping").status_code == 200
        assert c.get("/info").status_code == 401
        assert c.get("/info", headers={"Authorization": "Bearer k"}).json()["validation_workers"] == 2
    engine.healthy = False
    with client_of(engine) as c:
        assert c.get("/ping").status_code == 503
