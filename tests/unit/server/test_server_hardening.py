"""Bounded requests (fan-out, concurrency slots per sequence, payload size), fields refused by name, 500
bodies without exception text, and cancellation before the first token, against the fake engine."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest
from asgi_calls import disconnect_after, http_scope, ignore
from fastapi.testclient import TestClient

from fake_engine import FakeEngine, error_of
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

MSGS = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def engine():
    return FakeEngine()


def make_client(engine, **settings):
    return TestClient(create_app(engine, ServerSettings(**settings)))


# -- fan-out and slots ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {"prompt": ["a"] * 5, "max_tokens": 2}, "prompt"),
        ("/v1/completions", {"prompt": ["a", "b"], "n": 3, "max_tokens": 2}, "prompt"),
        ("/v1/completions", {"prompt": "a", "n": 5, "max_tokens": 2}, "n"),
        ("/v1/chat/completions", {"messages": MSGS, "n": 5, "max_tokens": 2}, "n"),
        ("/v1/completions", {"prompt": [[72]] * 5000, "n": 128, "max_tokens": 2}, "prompt"),
    ],
)
def test_fan_out_past_max_client_batch_size_is_422(engine, path, body, param):
    with make_client(engine) as c:
        r = c.post(path, json=body)
        assert r.status_code == 422, r.text
        message, _ = error_of(r, path)
        assert "--max-client-batch-size allows 4" in message
        assert r.json()["error"]["param"] == param
        assert engine.requests == [] and c.app.state.service.in_flight == 0


def test_fan_out_within_the_limit_is_served(engine):
    with make_client(engine) as c:
        r = c.post("/v1/completions", json={"prompt": ["ab", "c"], "n": 2, "max_tokens": 2, "seed": 1})
        assert r.status_code == 200 and len(r.json()["choices"]) == 4
        assert c.get("/info").json()["max_client_batch_size"] == 4
    with make_client(FakeEngine(), max_client_batch_size=9) as c:
        assert c.get("/info").json()["max_client_batch_size"] == 9


async def test_every_sequence_takes_a_concurrency_slot():
    engine = FakeEngine(delay=0.02)
    app = create_app(engine, ServerSettings(max_concurrent_requests=3, start_engine=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post("/v1/completions", json={"prompt": "x", "n": 4, "max_tokens": 2})
        assert r.status_code == 429 and error_of(r, "/v1/")[1] == "rate_limit_error"
        two = c.post("/v1/completions", json={"prompt": "x", "n": 2, "max_tokens": 5, "seed": 3})
        task = asyncio.ensure_future(two)
        await asyncio.sleep(0.03)
        assert app.state.service.in_flight == 2
        body = {"inputs": "x", "parameters": {"best_of": 2, "do_sample": True, "max_new_tokens": 2}}
        assert (await c.post("/generate", json=body)).status_code == 429  # 2 + 2 > 3
        assert (await c.post("/tokenize", json={"inputs": "ab"})).status_code == 200  # 2 + 1 <= 3
        assert (await task).status_code == 200
        assert app.state.service.in_flight == 0


async def test_tokenize_takes_a_slot():
    engine = FakeEngine(delay=0.02)
    app = create_app(engine, ServerSettings(max_concurrent_requests=1, start_engine=False))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        task = asyncio.ensure_future(
            c.post("/generate", json={"inputs": "x", "parameters": {"max_new_tokens": 5}})
        )
        await asyncio.sleep(0.03)
        r = await c.post("/tokenize", json={"inputs": "ab"})
        assert r.status_code == 429 and error_of(r, "/tokenize") == ("Model is overloaded", "overloaded")
        assert (await task).status_code == 200
        assert (await c.post("/tokenize", json={"inputs": "ab"})).status_code == 200
        text = (await c.get("/metrics")).text
        assert "tgi_request_count 1.0" in text  # /tokenize is not a generation request


# -- payload limit ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/generate", "/v1/completions"])
def test_payload_over_the_limit_is_413(engine, path):
    with make_client(engine, payload_limit=1000) as c:
        big = {"inputs": "x" * 2000} if path == "/generate" else {"prompt": "x" * 2000}
        r = c.post(path, json=big)
        assert r.status_code == 413
        message, kind = error_of(r, path)
        assert "--payload-limit (1000 bytes)" in message
        assert kind == ("invalid_request_error" if path.startswith("/v1/") else "payload_too_large")

        def chunks():  # no Content-Length: counted as it arrives
            for _ in range(20):
                yield b" " * 100
            yield b"{}"

        r = c.post(path, content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "--payload-limit" in error_of(r, path)[0]
        assert engine.requests == []
        assert c.get("/health").status_code == 200
        assert (
            c.post("/generate", json={"inputs": "ok", "parameters": {"max_new_tokens": 1}}).status_code == 200
        )


async def test_payload_refused_before_the_body_is_read():
    app = create_app(FakeEngine(), ServerSettings(payload_limit=10, start_engine=False))
    reads = []

    async def receive():
        reads.append(1)
        return {"type": "http.request", "body": b"{}", "more_body": False}

    sent = []

    async def send(message):
        sent.append(message)

    scope = http_scope("/generate", headers=((b"content-length", b"5000000"),))
    await app(scope, receive, send)
    assert sent[0]["status"] == 413 and reads == []


# -- fields refused by name --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "extra", "name"),
    [
        ("/v1/completions", {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ("/v1/chat/completions", {"tool_choice": "required"}, "tool_choice"),
        ("/v1/chat/completions", {"guided_whitespace_pattern": "[ ]?"}, "guided_whitespace_pattern"),
        ("/v1/completions", {"prediction": {"type": "content", "content": "x"}}, "prediction"),  # chat's only
        ("/v1/completions", {"parallel_tool_calls": False}, "parallel_tool_calls"),
        (
            "/v1/chat/completions",
            {"stream_options": {"continuous_usage_stats": True}},
            "stream_options.continuous_usage_stats",
        ),
        ("/v1/completions", {"best_of": 3}, "best_of"),
        ("/v1/completions", {"use_beam_search": True, "stream": True}, "stream"),
        ("/v1/completions", {"length_penalty": 0.5}, "length_penalty"),
        (
            "/v1/completions",
            {"structured_outputs": {"regex": "a", "whitespace_pattern": "[ ]?"}},
            "structured_outputs.whitespace_pattern",
        ),
        ("/v1/completions", {"guided_decoding_backend": "xgrammar"}, "guided_decoding_backend"),
    ],
)
def test_known_unserved_openai_fields_are_refused_by_name(engine, path, extra, name):
    body = {"messages": MSGS} if path.endswith("chat/completions") else {"prompt": "Hi"}
    with make_client(engine) as c:
        r = c.post(path, json={**body, "max_tokens": 2, **extra})
        assert r.status_code == 422, r.text
        message, kind = error_of(r, path)
        assert f"`{name}`" in message and kind == "invalid_request_error"
        assert r.json()["error"]["param"] == name
        assert engine.requests == []


def test_image_content_parts_are_refused_by_a_text_only_model(engine):
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "x"}}]
    with make_client(engine) as c:
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": content}]})
        assert r.status_code == 422
        assert "this model takes no images" in error_of(r, "/v1/")[0]
        assert r.json()["error"]["param"] == "messages[0].content[1].image_url.url"
        assert engine.requests == []


def test_content_parts_other_than_text_and_images_are_refused(engine):
    content = [{"type": "text", "text": "Hear this"}, {"type": "input_audio", "input_audio": {"data": "x"}}]
    with make_client(engine) as c:
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": content}]})
        assert r.status_code == 422
        assert "`messages[0].content[1].type`" in error_of(r, "/v1/")[0]
        assert "`input_audio` content is not supported" in error_of(r, "/v1/")[0]
        assert engine.requests == []


def test_neutral_values_of_known_fields_pass(engine):
    neutral = {
        "tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "logit_bias": {},
        "parallel_tool_calls": True, "store": False, "stream_options": None,
    }  # fmt: skip
    with make_client(engine) as c:
        r = c.post("/v1/chat/completions", json={"messages": MSGS, "max_tokens": 2, **neutral})
        assert r.status_code == 200, r.text


def test_a_field_no_api_defines_is_logged_and_ignored(engine, caplog):
    with make_client(engine) as c, caplog.at_level(logging.WARNING, logger="tgi.server"):
        r = c.post("/generate", json={"inputs": "Hi", "parameters": {"max_new_tokens": 2, "frobnicate": 1}})
        assert r.status_code == 200
    assert "`parameters.frobnicate`" in caplog.text


@pytest.mark.parametrize(
    ("parameters", "name"),
    [
        ({"adapter_id": "my-lora"}, "parameters.adapter_id"),
    ],
)
@pytest.mark.parametrize("path", ["/generate", "/generate_stream", "/"])
def test_tgi_fields_not_served_are_refused(engine, parameters, name, path):
    with make_client(engine) as c:
        r = c.post(path, json={"inputs": "Hi", "parameters": {"max_new_tokens": 2, **parameters}})
        assert r.status_code == 422, r.text
        message, kind = error_of(r, path)
        assert kind == "validation" and f"`{name}`" in message
        assert engine.requests == []
        ok = c.post(path, json={"inputs": "Hi", "parameters": {"max_new_tokens": 2, "watermark": False}})
        assert ok.status_code == 200


def test_vllm_stop_fields_are_honoured(engine):
    with make_client(engine) as c:
        body = {"prompt": "Hi", "max_tokens": 20, "stop": ["wor"], "stop_token_ids": [7]}
        r = c.post("/v1/completions", json=body)
        assert r.json()["choices"][0]["text"] == "Hello "  # OpenAI trims the stop sequence
        r = c.post("/v1/completions", json={**body, "include_stop_str_in_output": True})
        assert r.json()["choices"][0]["text"] == "Hello wor"
        assert [p.stop_token_ids for _, p in engine.requests] == [(7,), (7,)]


# -- 500s and siblings ------------------------------------------------------------------------------------
class _Exploding(FakeEngine):
    def stream_validated(self, request, request_id=None):
        raise RuntimeError("secret: /home/model/weights.bin is corrupt")


@pytest.mark.parametrize("path", ["/generate", "/v1/completions"])
def test_500_body_has_a_request_id_not_the_exception(path, caplog):
    with make_client(_Exploding()) as c, caplog.at_level(logging.ERROR, logger="tgi.server"):
        body = {"inputs": "Hi"} if path == "/generate" else {"prompt": "Hi"}
        r = c.post(path, json=body)
    assert r.status_code == 500
    message, _ = error_of(r, path)
    assert "secret" not in message and "weights" not in message and "request id" in message
    request_id = message.split("request id ")[1].split(";")[0]
    assert request_id in caplog.text and "weights.bin is corrupt" in caplog.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/generate", {"inputs": "x", "parameters": {"best_of": 2, "do_sample": True, "max_new_tokens": 50}}),
        ("/v1/completions", {"prompt": "x", "n": 3, "max_tokens": 50}),
        ("/v1/completions", {"prompt": "x", "n": 3, "max_tokens": 50, "stream": True}),
    ],
)
def test_one_failing_sibling_cancels_the_others(path, body):
    engine = FakeEngine(delay=0.02, fail_stream=1)
    with make_client(engine) as c:
        r = c.post(path, json=body)
        assert r.status_code == 500, r.text
        assert "the engine failed while running this request" in error_of(r, path)[0]
        # the siblings did not run to their end (the fake records a stream closed before its last token):
        # the failure cancelled them rather than waiting for them
        assert engine.running == 0 and len(engine.cancelled) == len(engine.requests) - 1
        assert c.app.state.service.in_flight == 0


# -- disconnect while queued ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/generate_stream", "/v1/chat/completions", "/v1/completions", "/"])
async def test_disconnect_before_the_first_token_cancels_at_once(path):
    engine = FakeEngine(first_delay=30)  # queued behind others: no token for a long time
    app = create_app(engine, ServerSettings(start_engine=False))
    payload = {
        "/generate_stream": {"inputs": "x", "parameters": {"max_new_tokens": 5}},
        "/": {"inputs": "x", "stream": True, "parameters": {"max_new_tokens": 5}},
        "/v1/chat/completions": {"messages": MSGS, "stream": True, "max_tokens": 5, "n": 2},
        "/v1/completions": {"prompt": "x", "stream": True, "max_tokens": 5},
    }[path]
    receive = disconnect_after(json.dumps(payload).encode(), 0.05)
    # the request ends long before its first token (30 s away): cancelled at the disconnect, not drained
    await asyncio.wait_for(app(http_scope(path), receive, ignore), 5)
    assert len(engine.cancelled) == len(engine.requests) >= 1 and engine.running == 0
    assert app.state.service.in_flight == 0
    assert 'tgi_request_failure{err="cancelled"}' in app.state.service.metrics.render().decode()
