"""vLLM's prompt and output details on OpenAI's routes against the fake engine: `prompt_logprobs` behind
--enable-prefill-logprobs, bounded, refused streamed and where the backend cannot rank prompt tokens;
`skip_special_tokens` and `spaces_between_special_tokens` reach the sampling parameters; chat's `echo` shows
the last message's content first when it has the answer's role, streamed and not. The effects on a real
model are in tests/e2e/test_prompt_details_clients.py."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fake_engine import REPLY, FakeEngine
from tgi.core.request import PromptToken, TopToken
from tgi.server.app import create_app
from tgi.server.openai.prompt_details import prompt_logprobs_body
from tgi.server.service.settings import ServerSettings

USER = [{"role": "user", "content": "Hi"}]
PREFIX = [*USER, {"role": "assistant", "content": "Once upon"}]


@pytest.fixture
def engine():
    return FakeEngine()


def client_of(engine, **settings) -> TestClient:
    return TestClient(create_app(engine, ServerSettings(**settings)))


def _error(r) -> tuple[str, str]:
    assert r.status_code == 422, r.text
    return r.json()["error"]["message"], r.json()["error"]["param"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_prompt_logprobs_need_the_flag_and_a_backend_that_ranks(engine, path):
    body = {"messages": USER} if "chat" in path else {"prompt": "Hi"}
    body = {**body, "max_tokens": 2, "prompt_logprobs": 1}
    with client_of(engine) as c:
        message, param = _error(c.post(path, json=body))
    assert param == "prompt_logprobs" and "--enable-prefill-logprobs" in message
    with client_of(engine, enable_prefill_logprobs=True, max_top_n_tokens=5) as c:
        message, param = _error(c.post(path, json={**body, "prompt_logprobs": 6}))
        assert param == "prompt_logprobs" and "<= 5" in message
        message, param = _error(c.post(path, json={**body, "prompt_logprobs": -1}))
        assert param == "prompt_logprobs"
        message, param = _error(c.post(path, json={**body, "stream": True}))
        assert param == "prompt_logprobs" and "streaming" in message
        message, _ = _error(c.post(path, json=body))  # the fake backend ranks no prompt token
        assert "`prompt_logprobs`" in message and "fake backend" in message
    assert engine.requests == []


def test_prompt_logprobs_body_has_vllms_shape():
    tokens = (
        PromptToken(1, "a", None),
        PromptToken(2, "b", -0.5, 1, (TopToken(2, "b", -0.5, False), TopToken(3, "c", -1.5, False))),
        PromptToken(3, "c", -4.0, 7, (TopToken(5, "e", -0.1, False), TopToken(6, "<s>", -2.5, True))),
    )
    body = prompt_logprobs_body(tokens)
    assert body[0] is None
    assert body[1] == {
        "2": {"logprob": -0.5, "rank": 1, "decoded_token": "b"},
        "3": {"logprob": -1.5, "rank": 2, "decoded_token": "c"},
    }
    assert list(body[2]) == ["3", "5", "6"] and body[2]["3"]["rank"] == 7 and body[2]["6"]["rank"] == 2
    assert prompt_logprobs_body(tokens[1:2], as_ids=True)[0]["2"]["decoded_token"] == "token_id:2"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_detokenization_fields_reach_the_sampling_parameters(engine, path):
    body = {"messages": USER} if "chat" in path else {"prompt": "Hi"}
    extra = {"skip_special_tokens": False, "spaces_between_special_tokens": False}
    with client_of(engine) as c:
        assert c.post(path, json={**body, "max_tokens": 2}).status_code == 200
        assert c.post(path, json={**body, "max_tokens": 2, **extra}).status_code == 200
    default, asked = engine.requests[0][1], engine.requests[1][1]
    assert default.skip_special_tokens and default.spaces_between_special_tokens
    assert not asked.skip_special_tokens and not asked.spaces_between_special_tokens


def _chat(c, messages, **extra) -> str:
    r = c.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 3, **extra})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def _streamed(c, messages, **extra) -> list[str]:
    body = {"messages": messages, "max_tokens": 3, "stream": True, **extra}
    r = c.post("/v1/chat/completions", json=body)
    parts = [json.loads(p[6:]) for p in r.text.split("\n\n") if p.startswith("data: {")]
    return [p["choices"][0]["delta"].get("content") or "" for p in parts if p["choices"]]


def test_chat_echo_shows_the_final_assistant_message_first(engine):
    with client_of(engine) as c:
        assert _chat(c, PREFIX, echo=True) == "Once upon" + REPLY[:3]
        assert _chat(c, PREFIX) == REPLY[:3]
        assert _chat(c, USER, echo=True) == REPLY[:3]  # the last message is not the answer's role
        # without a generation prompt the answer's role is the last message's: a user's is shown too
        assert _chat(c, USER, echo=True, add_generation_prompt=False) == "Hi" + REPLY[:3]
        streamed = _streamed(c, PREFIX, echo=True)
        assert streamed[0] == "Once upon" and "".join(streamed) == "Once upon" + REPLY[:3]
        assert "".join(_streamed(c, USER, echo=True)) == REPLY[:3]
