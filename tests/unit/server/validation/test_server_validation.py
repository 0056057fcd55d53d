"""422s with TGI's body for every out-of-range parameter, length, malformed JSON and wrong type; 429 when
more than --max-concurrent-requests are in flight. None of them reaches the engine."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine, error_of
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings


@pytest.fixture
def engine():
    return FakeEngine()


@pytest.fixture
def client(engine):
    with TestClient(create_app(engine, ServerSettings())) as c:
        yield c


def gen(inputs="Hi", **parameters):
    return {"inputs": inputs, "parameters": parameters}


V = "Input validation error: "


@pytest.mark.parametrize(
    ("route", "body", "message"),
    [
        ("/generate", gen(temperature=0), "`temperature` must be strictly positive"),
        ("/generate", gen(temperature=-1.0), "`temperature` must be strictly positive"),
        ("/generate", gen(top_p=1.5), "`top_p` must be > 0.0 and < 1.0"),
        ("/generate", gen(top_p=0.0), "`top_p` must be > 0.0 and < 1.0"),
        ("/generate", gen(top_p=1.0), "`top_p` must be > 0.0 and < 1.0"),  # TGI's bound is exclusive
        ("/generate", gen(top_k=-1), "`top_k` must be strictly positive"),
        ("/generate", gen(typical_p=2.0), "`typical_p` must be > 0.0 and <= 1.0"),
        ("/generate", gen(repetition_penalty=0.0), "`repetition_penalty` must be strictly positive"),
        ("/generate", gen(frequency_penalty=3.0), "`frequency_penalty` must be >= -2.0 and <= 2.0"),
        ("/generate", gen(max_new_tokens=0), "`max_new_tokens` must be strictly positive"),
        (
            "/generate",
            gen(stop=["a", "b", "c", "d", "e"]),
            "`stop` supports up to 4 stop sequences. Given: 5",
        ),
        ("/generate", gen(top_n_tokens=6), "`top_n_tokens` must be >= 0 and <= 5. Given: 6"),
        ("/generate", gen(best_of=3, do_sample=True), "`best_of` must be > 0 and <= 2. Given: 3"),
        ("/generate", gen(best_of=2), "you must use sampling when `best_of` is > 1"),
        ("/generate", gen(best_of=2, do_sample=True, seed=1), "`seed` must not be set when `best_of` > 1"),
        ("/generate", gen(truncate=0), "`truncate` must be strictly positive and less than 64. Given: 0"),
        ("/generate", gen(""), "`inputs` cannot be empty"),
        (
            "/generate",
            gen("x" * 100, max_new_tokens=50),
            "`inputs` tokens + `max_new_tokens` must be <= 128. Given: 100 `inputs` tokens and 50 `max_new_tokens`",
        ),
        (
            "/generate",
            gen("x" * 100, max_new_tokens=10),
            "`inputs` must have less than 64 tokens. Given: 100",
        ),
        (
            "/generate_stream",
            gen(best_of=2, do_sample=True),
            "`best_of` != 1 is not supported when streaming tokens",
        ),
        (
            "/generate_stream",
            gen(decoder_input_details=True),
            "`decoder_input_details` == true is not supported when streaming tokens",
        ),
        ("/", {**gen(temperature=0), "stream": True}, "`temperature` must be strictly positive"),
        ("/v1/completions", {"prompt": "Hi", "stop": ["a", "b", "c", "d", "e"]}, "`stop` supports up to 4"),
        (
            "/v1/completions",
            {"prompt": "Hi", "logprobs": 9},
            "`top_n_tokens` must be >= 0 and <= 5. Given: 9",
        ),
        ("/v1/completions", {"prompt": "Hi", "max_tokens": 0}, "`max_tokens` must be strictly positive"),
        ("/v1/completions", {"prompt": "x" * 100}, "`inputs` must have less than 64 tokens. Given: 100"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "Hi"}], "top_p": 2.0},
            "`top_p` must be > 0.0 and <= 1.0",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "Hi"}], "presence_penalty": -3},
            "`presence_penalty` must be >= -2.0 and <= 2.0",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "Hi"}], "logprobs": True, "top_logprobs": 6},
            "`top_n_tokens` must be >= 0 and <= 5. Given: 6",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 500},
            "`inputs` tokens + `max_new_tokens` must be <= 128",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "Hi"}], "n": 0},
            "`n` must be >= 1",
        ),
    ],
)
def test_validation_errors(client, engine, route, body, message):
    r = client.post(route, json=body)
    assert r.status_code == 422, r.text
    text, kind = error_of(r, route)
    assert kind == ("invalid_request_error" if route.startswith("/v1/") else "validation")
    assert text.startswith(V + message), r.json()
    assert engine.requests == []  # never reached the engine


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b'{"inputs": 3}',
        b'{"inputs": "Hi", "parameters": {"temperature": "hot"}}',
        b'{"inputs": "Hi", "parameters": {"max_new_tokens": 2.5}}',
        b'{"inputs": "Hi", "parameters": {"do_sample": "yes"}}',
        b'{"parameters": {}}',
        b"[]",
    ],
)
def test_malformed_and_wrong_types_are_422(client, engine, raw):
    r = client.post("/generate", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert set(r.json()) == {"error", "error_type"} and r.json()["error_type"] == "validation"
    assert engine.requests == []


def test_openai_wrong_types_are_422(client):
    r = client.post("/v1/chat/completions", json={"messages": "hi"})
    assert r.status_code == 422 and error_of(r, "/v1/")[1] == "invalid_request_error"
    assert r.json()["error"]["param"] == "messages"
    r = client.post("/v1/chat/completions", json={"messages": []})
    assert r.status_code == 422


def test_engine_validation_error_is_422(client, engine):
    engine.refuse = "too long for the engine"
    r = client.post("/generate", json=gen("x", max_new_tokens=2))
    assert r.status_code == 422 and r.json() == {
        "error": "Input validation error: too long for the engine",
        "error_type": "validation",
    }
    r = client.post("/generate_stream", json=gen("x", max_new_tokens=2))
    assert r.status_code == 422 and r.json()["error_type"] == "validation"


async def test_burst_over_limit_gets_429_and_nothing_is_lost():
    engine = FakeEngine(delay=0.02)
    app = create_app(engine, ServerSettings(max_concurrent_requests=3, start_engine=False))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        rs = await asyncio.gather(
            *(c.post("/generate", json=gen(max_new_tokens=5)) for _ in range(8)),
            *(c.post("/generate_stream", json=gen(max_new_tokens=5)) for _ in range(2)),
        )
        codes = [r.status_code for r in rs]
        assert set(codes) <= {200, 429} and codes.count(200) == 3 and codes.count(429) == 7
        for r in rs:
            if r.status_code == 429:
                assert r.json() == {"error": "Model is overloaded", "error_type": "overloaded"}
        assert app.state.service.in_flight == 0
        r = await c.post("/generate", json=gen(max_new_tokens=2))  # slots came back
        assert r.status_code == 200


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        (
            {"logit_bias": {str(t): 1 for t in range(50_000)}},
            "logit_bias",
            "`logit_bias` may name at most 300 tokens. Given: 50000",
        ),
        (
            {"stop_token_ids": list(range(301))},
            "stop_token_ids",
            "`stop_token_ids` may hold at most 300 token ids. Given: 301",
        ),
        ({"stop_token_ids": [7, 0x110000]}, None, "`stop_token_ids` must be in [0, 1114112)"),
    ],
)
def test_token_lists_past_their_cap_or_the_vocabulary_are_422s(engine, client, body, param, message):
    r = client.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2, **body})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["message"] == V + message and error["param"] == param
    assert engine.requests == []


@pytest.mark.parametrize("route", ["/tokenize", "/chat_tokenize"])
def test_tokenize_refuses_inputs_past_max_input_tokens(engine, client, route):
    limit = engine.config.max_input_tokens
    fits, too_long = ("x" * (limit - 20), "x" * (limit + 1))
    for text, status in ((fits, 200), (too_long, 422)):
        body = {"inputs": text} if route == "/tokenize" else {"messages": [{"role": "user", "content": text}]}
        r = client.post(route, json=body)
        assert r.status_code == status, r.text
    assert r.json()["error"].startswith(f"{V}`inputs` must have less than {limit} tokens. Given: ")
