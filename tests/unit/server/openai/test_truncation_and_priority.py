"""vLLM's `truncate_prompt_tokens` (the prompt's last tokens, counted in `usage`) and `priority` (the queue's
order under `--scheduling-policy priority`, refused by name otherwise) on the OpenAI routes, against the
fake engine (one token per character)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

CHAT = {"messages": [{"role": "user", "content": "abcdefgh"}], "max_tokens": 2}
TEMPLATED = "<user>abcdefgh<assistant>"  # the fake model's chat template


def _client(engine: FakeEngine, **settings) -> TestClient:
    return TestClient(create_app(engine, ServerSettings(**settings)))


def test_the_prompt_keeps_its_last_tokens_and_usage_counts_them():
    engine = FakeEngine()
    with _client(engine) as c:
        r = c.post(
            "/v1/completions", json={"prompt": "0123456789", "max_tokens": 2, "truncate_prompt_tokens": 4}
        )
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 4, r.text
        assert engine.requests[-1][0] == [ord(ch) for ch in "6789"]
        r = c.post("/v1/completions", json={"prompt": "0123456789", "max_tokens": 2, "echo": True,
                                            "truncate_prompt_tokens": 3})  # fmt: skip
        assert r.json()["choices"][0]["text"].startswith("789"), r.text  # the prompt that ran
        r = c.post("/v1/chat/completions", json={**CHAT, "truncate_prompt_tokens": 5})  # after the template
        assert r.status_code == 200 and engine.requests[-1][0] == [ord(ch) for ch in TEMPLATED[-5:]]
        r = c.post("/v1/chat/completions", json={**CHAT, "truncate_prompt_tokens": -1})  # up to the limit
        assert r.status_code == 200 and engine.requests[-1][0] == [ord(ch) for ch in TEMPLATED]


@pytest.mark.parametrize("keep", [0, -2, 65])
def test_a_length_out_of_range_is_a_422_naming_the_field(keep):
    with _client(FakeEngine()) as c:  # the fake engine's inputs: at most 64 tokens
        r = c.post("/v1/completions", json={"prompt": "abc", "truncate_prompt_tokens": keep})
        assert r.status_code == 422 and r.json()["error"]["param"] == "truncate_prompt_tokens", r.text


def test_priority_orders_the_queue_only_where_the_operator_allows_it():
    engine = FakeEngine()
    with _client(engine) as c:
        r = c.post("/v1/chat/completions", json={**CHAT, "priority": 3})
        assert r.status_code == 422 and r.json()["error"]["param"] == "priority", r.text
        assert "--scheduling-policy priority" in r.json()["error"]["message"]
        assert c.post("/v1/chat/completions", json={**CHAT, "priority": 0}).status_code == 200  # the default
    with _client(engine, scheduling_policy="priority") as c:
        for value in (3, -2):
            r = c.post("/v1/completions", json={"prompt": "abc", "max_tokens": 2, "priority": value})
            assert r.status_code == 200, r.text
            assert engine.requests[-1][1].priority == -value  # the scheduler's: higher runs first
