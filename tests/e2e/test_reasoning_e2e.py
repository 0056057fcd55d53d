"""Reasoning output and models' own tool calls through a real `tgi launch --reasoning-parser deepseek_r1
--tool-call-parser auto` (the session's `reasoning_server`) on a tiny random model whose chat template
(`e2e_server.REASONING_TEMPLATE`) opens `<think>` as DeepSeek-R1's does and teaches Hermes tool calls, with
the official `openai` client: the reasoning and the answer stream in their own delta fields; a guided regex
constrains the answer after the reasoning, not the thinking (`</think>` is made likely with `logit_bias` so
that the random model ends its thinking); a tools request whose output is no call answers as text, never an
error; a model swap to a model the named reasoning parser cannot read is refused."""

from __future__ import annotations

import re

import httpx
import openai
import pytest
from e2e_server import REASONING_ADMIN_KEY as ADMIN_KEY
from helpers.reasoning_model import byte_tokenizer

ANSWER = "[a-z]{3,8}"


@pytest.fixture(scope="module")
def served(reasoning_server, reasoning_models):
    """The session's reasoning server (tests/e2e/conftest.py: the flags above, the template of
    `REASONING_TEMPLATE`), and the plain model it may be asked to swap to."""
    client = openai.OpenAI(base_url=reasoning_server.url + "/v1", api_key="-", max_retries=0)
    return client, reasoning_server.url, reasoning_models[1]


def _request(**extra) -> dict:
    end = byte_tokenizer().convert_tokens_to_ids("</think>")
    return dict(
        model="tgi",
        messages=[{"role": "user", "content": "What is 2 + 2?"}],
        max_tokens=120,
        temperature=1.0,
        seed=7,
        logit_bias={str(end): 2.0},
        extra_body={"guided_regex": ANSWER},
        **extra,
    )


def test_reasoning_and_a_guided_answer_stream_in_their_own_fields(served):
    client = served[0]
    stream = client.chat.completions.create(stream=True, **_request())
    kinds, reasoning, answer, finish = [], "", "", None
    for chunk in stream:
        choice = chunk.choices[0]
        delta = choice.delta.model_dump()
        if delta.get("reasoning_content"):
            kinds.append("reasoning")
            reasoning += delta["reasoning_content"]
        if delta.get("content"):
            kinds.append("content")
            answer += delta["content"]
        finish = choice.finish_reason or finish
    assert reasoning and "</think>" not in reasoning
    assert re.fullmatch(ANSWER, answer), (reasoning, answer)  # the grammar held after the reasoning only
    assert kinds == sorted(kinds, key=lambda k: k == "content"), "the reasoning streams first"
    assert finish == "stop"
    whole = client.chat.completions.create(**_request()).choices[0]
    message = whole.message.model_dump()
    assert (message["reasoning_content"], message["content"]) == (reasoning, answer)


def test_tools_with_the_models_own_format_answer_text_when_the_output_is_no_call(served):
    client = served[0]
    tools = [
        {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
    ]
    request = _request(tools=tools)
    request.pop("extra_body")
    choice = client.chat.completions.create(**request).choices[0]
    message = choice.message.model_dump()
    assert choice.finish_reason in ("stop", "length") and message["tool_calls"] is None
    assert isinstance(message["content"], str) and message["reasoning_content"]


def test_a_swap_to_a_model_the_named_parser_cannot_read_is_refused(served):
    client, url, plain = served
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    r = httpx.post(url + "/admin/model", json={"model_id": str(plain)}, headers=headers, timeout=120)
    assert r.status_code == 422, r.text
    assert "--reasoning-parser deepseek_r1: this model's chat template never" in r.text
    whole = client.chat.completions.create(**_request()).choices[0]  # still served, still reasoning
    assert whole.message.model_dump()["reasoning_content"] is not None
