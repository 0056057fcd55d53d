"""Anthropic Messages with a reasoning model: a real `tgi launch --reasoning-parser deepseek_r1` on a tiny
random model whose chat template (tests/helpers/reasoning_model.py) opens `<think>` as DeepSeek-R1's does,
the session's server shared with the Responses file; with the official `anthropic` client the reasoning is a
`thinking` block streamed as `thinking_delta` events, before any text block, whole and streamed alike
(greedy); `thinking: enabled` is refused by name."""

from __future__ import annotations

import anthropic
import httpx
import pytest
from anthropic_schemas import check_stream, parse_stream

pytestmark = pytest.mark.e2e

ASK = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture(scope="module")
def served(reasoning_server):
    """The session's reasoning server (tests/e2e/conftest.py), shared with the Responses file."""
    url = reasoning_server.url
    return anthropic.Anthropic(base_url=url, api_key="-", timeout=120, max_retries=0), url


def test_reasoning_is_a_thinking_block_whole_and_streamed(served):
    client, url = served
    kwargs = dict(model="tgi", max_tokens=40, messages=ASK, extra_body={"temperature": 0})
    whole = client.messages.create(**kwargs)
    first = whole.content[0]
    assert first.type == "thinking" and first.thinking and first.signature == ""
    assert "<think>" not in first.thinking and "</think>" not in first.thinking
    assert all(b.type == "text" and "</think>" not in b.text for b in whole.content[1:])
    with client.messages.stream(**kwargs) as stream:
        events = list(stream)
        streamed = stream.get_final_message()
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in whole.content]
    deltas = [
        e.delta.thinking
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "thinking_delta"
    ]
    assert "".join(deltas) == first.thinking
    raw = {"model": "tgi", "max_tokens": 40, "messages": ASK, "temperature": 0, "stream": True}
    r = httpx.post(url + "/v1/messages", json=raw, timeout=120)
    check_stream(parse_stream(r.text))


def test_thinking_settings(served):
    client = served[0]
    adaptive = client.messages.create(model="tgi", max_tokens=4, messages=ASK, thinking={"type": "adaptive"})
    assert adaptive.usage.output_tokens <= 4
    with pytest.raises(anthropic.BadRequestError, match="thinking"):
        client.messages.create(
            model="tgi", max_tokens=4, messages=ASK, thinking={"type": "enabled", "budget_tokens": 1024}
        )
