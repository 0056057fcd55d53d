"""OpenAI routes against the fake engine: bodies, chunks, usage, n, logprobs, [DONE]."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fake_engine import REPLY, FakeEngine
from tgi.core.sampling_params import SamplingParams
from tgi.server.app import create_app

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


@pytest.fixture
def engine():
    return FakeEngine()


@pytest.fixture
def client(engine):
    with TestClient(create_app(engine)) as c:
        yield c


def chunks(text: str) -> list:
    parts = text.split("\n\n")
    assert parts[-1] == "" and parts[-2] == "data: [DONE]"
    return [json.loads(p[len("data: ") :]) for p in parts[:-2]]


def test_chat_completion(client, engine):
    r = client.post(
        "/v1/chat/completions", json={"model": "x", "messages": MSGS, "temperature": 0, "max_tokens": 5}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "fake/model"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": REPLY[:5]},
            "logprobs": None,
            "finish_reason": "length",
        }
    ]
    prompt = "<system>Be brief.<user>Hi<assistant>"
    assert body["usage"] == {
        "prompt_tokens": len(prompt),
        "completion_tokens": 5,
        "total_tokens": len(prompt) + 5,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    ids, params = engine.requests[0]
    assert ids == [ord(c) for c in prompt] and params.is_greedy


def test_chat_defaults_sample_and_run_to_eos(client, engine):
    body = client.post("/v1/chat/completions", json={"messages": MSGS, "seed": 7}).json()
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["message"]["content"] == REPLY
    params = engine.requests[0][1]
    assert params.do_sample and params.seed == 7


def test_chat_content_parts_n_and_logprobs(client, engine):
    msgs = [{"role": "user", "content": [{"type": "text", "text": "H"}, {"type": "text", "text": "i"}]}]
    body = client.post(
        "/v1/chat/completions",
        json={"messages": msgs, "n": 2, "seed": 1, "max_tokens": 3, "logprobs": True, "top_logprobs": 2},
    ).json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert [p.seed for _, p in engine.requests] == [1, 2]
    content = body["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == list(REPLY[:3]) and content[0]["logprob"] == -0.5
    assert len(content[0]["top_logprobs"]) == 2 and content[0]["bytes"] == [ord("H")]
    assert body["usage"]["completion_tokens"] == 6
    assert engine.requests[0][0] == [ord(c) for c in "<user>Hi<assistant>"]


def test_chat_stream_with_usage(client):
    r = client.post(
        "/v1/chat/completions",
        json={"messages": MSGS, "stream": True, "max_tokens": 4, "stream_options": {"include_usage": True}},
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    cs = chunks(r.text)
    assert all(c["object"] == "chat.completion.chunk" for c in cs)
    assert len({c["id"] for c in cs}) == 1
    tokens, usage = cs[:-1], cs[-1]
    assert "".join(c["choices"][0]["delta"]["content"] for c in tokens) == REPLY[:4]
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None, None, None, "length"]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("stream", [False, True])
def test_usage_reports_the_prompt_tokens_read_from_the_prefix_cache(stream):
    # chat: the engine read 16 prompt tokens from the cache; completions with two prompts x n=2: a prompt
    # counts once, with the fewest cached tokens of its choices (streams 1-4: prompt 0 twice, prompt 1 twice)
    engine = FakeEngine(cached_tokens=(16, 2, 3, 0, 1))
    with TestClient(create_app(engine)) as c:
        opts = {"stream": stream, "stream_options": {"include_usage": True}} if stream else {}
        chat = c.post("/v1/chat/completions", json={"messages": MSGS, "max_tokens": 2, **opts})
        completion = c.post("/v1/completions", json={"prompt": ["ab", "cd"], "n": 2, "max_tokens": 2, **opts})
    usages = [chunks(r.text)[-1]["usage"] if stream else r.json()["usage"] for r in (chat, completion)]
    assert [u["prompt_tokens_details"] for u in usages] == [{"cached_tokens": 16}, {"cached_tokens": 2}]
    assert usages[1]["prompt_tokens"] == 4


def test_chat_stream_n2_interleaves(client):
    r = client.post("/v1/chat/completions", json={"messages": MSGS, "stream": True, "max_tokens": 3, "n": 2})
    cs = chunks(r.text)
    for i in (0, 1):
        mine = [c["choices"][0] for c in cs if c["choices"][0]["index"] == i]
        assert "".join(c["delta"]["content"] for c in mine) == REPLY[:3]


def test_completions_prompt_list_and_ignore_eos(client, engine):
    body = client.post(
        "/v1/completions",
        json={"prompt": ["ab", "c"], "max_tokens": 20, "ignore_eos": True, "temperature": 0},
    ).json()
    assert body["object"] == "text_completion"
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert all(c["finish_reason"] == "length" for c in body["choices"])
    assert body["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 40,
        "total_tokens": 43,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert all(p.ignore_eos for _, p in engine.requests)


def test_completions_default_16_tokens_token_ids_and_logprobs(client, engine):
    body = client.post("/v1/completions", json={"prompt": [72, 105], "logprobs": 2, "temperature": 0}).json()
    # OpenAI's meaning: temperature 0 is greedy, 16 new tokens by default, `logprobs: 2` asks for the
    # chosen token's logprob and the 2 best alternatives; everything else off
    expected = SamplingParams(
        do_sample=False,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        typical_p=1.0,
        repetition_penalty=1.0,
        frequency_penalty=0.0,
        presence_penalty=0.0,
        seed=None,
        max_new_tokens=16,
        min_new_tokens=0,
        stop=(),
        ignore_eos=False,
        logprobs=True,
        top_n_tokens=2,
        prompt_logprobs=False,
    )
    assert engine.requests[0] == ([72, 105], expected)
    assert engine.requests[0][1].max_new_tokens == 16
    lp = body["choices"][0]["logprobs"]
    assert lp["tokens"][:2] == ["H", "e"] and lp["text_offset"][:3] == [0, 1, 2]
    assert len(lp["top_logprobs"][0]) == 2


def test_completions_stream(client):
    r = client.post("/v1/completions", json={"prompt": "Hi", "stream": True, "max_tokens": 3})
    cs = chunks(r.text)
    assert all(c["object"] == "text_completion" for c in cs)
    assert "".join(c["choices"][0]["text"] for c in cs) == REPLY[:3]


def test_models(client):
    assert client.get("/v1/models").json()["data"][0]["id"] == "fake/model"


def test_a_streamed_choice_never_shows_part_of_a_stop_sequence(client):
    """As the real engine streams (core's stop matching): text that may start a stop sequence is held back,
    and a matched one is trimmed, so the chunks add up to the whole choice's text."""
    body = {"prompt": "Hi", "max_tokens": 20, "stop": ["wor"], "stream": True}
    texts = [c["choices"][0]["text"] for c in chunks(client.post("/v1/completions", json=body).text)]
    assert "".join(texts) == "Hello " and "w" not in texts and texts[-1] == ""
    whole = client.post("/v1/completions", json={**body, "stream": False}).json()["choices"][0]["text"]
    assert whole == "Hello "
