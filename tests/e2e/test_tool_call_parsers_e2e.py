"""A model's own tool-call format end to end: a real `tgi launch --tool-call-parser auto` on a tiny random
model whose chat template (built here) teaches Hermes `<tool_call>` calls, with the official `openai`
client. A random model writes no call by itself, so the request's own `guided_regex` (a literal call)
makes it write one: the server's path is the one a real model's call takes (template found, `tool_choice:
auto` without our grammar, the Hermes parser reading the text), on chat completions whole and streamed
(Responses takes no `guided_regex`: its route's reading of the same parser is tested on the fake engine)."""

from __future__ import annotations

import json

import openai
import pytest
from helpers.reasoning_model import save_reasoning_model

TEMPLATE = (
    "{% if tools %}You may call: {{ tools | tojson }}. Answer a call as "
    '<tool_call>{"name": <name>, "arguments": <object>}</tool_call>.{% endif %}'
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] or '' }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CALL = '<tool_call>{"name":"get_time","arguments":{"tz":"CET"}}</tool_call>'
FORCED = CALL.replace("{", "\\{").replace("}", "\\}")  # the call as a literal regex
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def client(tmp_path_factory, launch_server, stop_server):
    root = tmp_path_factory.mktemp("tool-parsers-e2e")
    model = save_reasoning_model(root / "model", TEMPLATE)
    server = launch_server(
        root, "--model-id", str(model), "--backend", "cpu", "--dtype", "float32", "--max-total-tokens", "512",
        "--tool-call-parser", "auto",
    )  # fmt: skip
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="-", max_retries=0)
    assert stop_server(server) == 0, server.logs()


def _chat(client: openai.OpenAI, **extra):
    return client.chat.completions.create(
        model="tgi",
        messages=[{"role": "user", "content": "Time in Paris?"}],
        tools=TOOLS,
        max_tokens=len(CALL) + 8,
        temperature=0,
        extra_body={"guided_regex": FORCED},
        **extra,
    )


def test_a_hermes_call_is_a_tool_call_whole_and_streamed(client):
    choice = _chat(client).choices[0]
    assert choice.finish_reason == "tool_calls", choice
    [call] = choice.message.tool_calls
    assert call.id.startswith("call_") and call.function.name == "get_time"
    assert json.loads(call.function.arguments) == {"tz": "CET"}
    assert not choice.message.content

    calls, content, finish = [], "", None
    for chunk in _chat(client, stream=True):
        delta = chunk.choices[0].delta
        calls += delta.tool_calls or []
        content += delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    [streamed] = calls
    assert (streamed.index, streamed.function.name) == (0, "get_time")
    assert json.loads(streamed.function.arguments) == {"tz": "CET"}
    assert finish == "tool_calls" and not content.strip()
