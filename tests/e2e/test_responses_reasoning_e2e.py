"""OpenAI Responses with a reasoning model: a real `tgi launch --reasoning-parser deepseek_r1` on a tiny random
model whose chat template (tests/helpers/reasoning_model.py) opens `<think>` as DeepSeek-R1's does, the
session's server shared with the Anthropic file; with the official `openai` client the reasoning is a
`reasoning` output item streamed as `response.reasoning_text.delta` events, before any message, whole and
streamed alike (greedy), every event validated by the client's own models."""

from __future__ import annotations

import openai
import pytest
from helpers.openai_responses import validated_events

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def client(reasoning_server):
    """The session's reasoning server (tests/e2e/conftest.py), shared with the Anthropic file."""
    return openai.OpenAI(base_url=reasoning_server.url + "/v1", api_key="-", timeout=120, max_retries=0)


def test_reasoning_is_an_output_item_whole_and_streamed(client):
    kwargs = dict(model="tgi", input="What is 2 + 2?", max_output_tokens=40, temperature=0)
    whole = client.responses.create(**kwargs)
    events = validated_events(client, **kwargs)
    streamed = events[-1].response
    assert [i.type for i in streamed.output] == [i.type for i in whole.output]
    first = whole.output[0]
    assert first.type == "reasoning" and first.summary == [] and first.content[0].type == "reasoning_text"
    assert [i.content[0].text for i in streamed.output[:1]] == [first.content[0].text]
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert deltas and deltas == first.content[0].text
    assert "<think>" not in deltas and "</think>" not in deltas
    assert [e.output_index for e in events if e.type == "response.reasoning_text.delta"] == [0] * sum(
        e.type == "response.reasoning_text.delta" for e in events
    )
    message = [i for i in whole.output if i.type == "message"]
    assert all("</think>" not in i.content[0].text for i in message)
