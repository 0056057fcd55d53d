"""vLLM's `return_tokens_as_token_ids`: with logprobs, every token (chosen, alternative, echoed prompt) is
named `token_id:<id>`, whole and streamed, on chat and completions, against the fake engine (one token per
character, so the ids are the characters' code points)."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from fake_engine import REPLY, FakeEngine
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "logprobs": True, "top_logprobs": 1}
IDS = [f"token_id:{ord(ch)}" for ch in REPLY[:3]]


def _client() -> TestClient:
    return TestClient(create_app(FakeEngine(), ServerSettings(enable_prefill_logprobs=True)))


def _stream(c: TestClient, path: str, body: dict) -> list[dict]:
    with c.stream("POST", path, json={**body, "stream": True}) as r:
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    return [json.loads(line) for line in lines]


def test_chat_names_tokens_by_id():
    with _client() as c:
        r = c.post("/v1/chat/completions", json={**CHAT, "return_tokens_as_token_ids": True})
        content = r.json()["choices"][0]["logprobs"]["content"]
        assert [e["token"] for e in content] == IDS, r.text
        assert all(t["token"].startswith("token_id:") for e in content for t in e["top_logprobs"])
        chunks = _stream(c, "/v1/chat/completions", {**CHAT, "return_tokens_as_token_ids": True})
        streamed = [
            e["token"]
            for ch in chunks
            for c_ in ch["choices"]
            for e in (c_["logprobs"] or {}).get("content", [])
        ]
        assert streamed == IDS
        plain = c.post("/v1/chat/completions", json=CHAT).json()["choices"][0]["logprobs"]["content"]
        assert [e["token"] for e in plain] == list(REPLY[:3])  # the default: their text


def test_completions_name_tokens_and_the_echoed_prompt_by_id():
    with _client() as c:
        body = {
            "prompt": "ab",
            "max_tokens": 3,
            "logprobs": 1,
            "echo": True,
            "return_tokens_as_token_ids": True,
        }
        logprobs = c.post("/v1/completions", json=body).json()["choices"][0]["logprobs"]
        assert logprobs["tokens"] == [f"token_id:{ord('a')}", f"token_id:{ord('b')}", *IDS]
        assert all(k.startswith("token_id:") for tops in logprobs["top_logprobs"] if tops for k in tops)
