"""Chat completions through the output parsers, on the fake engine replying recorded model outputs:
`reasoning_content` (whole and as its own delta field), the model's own tool calls with `tool_choice:
auto` (no grammar sent to the engine), unparseable calls as text; and the pieces the parsers read."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fake_engine import CharTokenizer, FakeEngine
from tgi.core.config import EngineConfig
from tgi.core.request import TokenEvent
from tgi.server.app import create_app
from tgi.server.chat.output import ChatOutputStream, output_text, piece_of, reasoning_tokens
from tgi.server.chat.parsers import OutputParsers, resolve
from tgi.server.chat.tools import plan_tools
from tgi.server.service.settings import ServerSettings

MSGS = [{"role": "user", "content": "Hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    }
]
CALL = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'


class OpensThinking(CharTokenizer):
    """A template that opens the reasoning in its generation prompt (DeepSeek-R1's way) and teaches Hermes
    tool calls."""

    chat_template = (
        "{{ tools }} <tool_call></tool_call> {% for m in messages %}{{ m.content }}{% endfor %}<think>"
    )

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **_):
        return super().apply_chat_template(messages, tokenize, add_generation_prompt) + "<think>\n"


class ModelOpensThinking(CharTokenizer):
    """Qwen3's way: the model writes `<think>` itself."""

    chat_template = "{% for m in messages %}{{ m.content.split('</think>')[-1] }}{% endfor %}"


def _client(reply: str, tokenizer: CharTokenizer, **settings) -> tuple[TestClient, FakeEngine]:
    config = EngineConfig(
        model_id="fake/model",
        max_input_tokens=64,
        max_total_tokens=256,
        max_batch_prefill_tokens=256,
        max_batch_total_tokens=1024,
    )
    engine = FakeEngine(config=config, reply=reply, tokenizer=tokenizer)
    return TestClient(create_app(engine, ServerSettings(**settings))), engine


def _stream(client: TestClient, **body) -> list[dict]:
    r = client.post("/v1/chat/completions", json={"model": "x", "messages": MSGS, "stream": True, **body})
    assert r.status_code == 200, r.text
    parts = r.text.split("\n\n")
    assert parts[-2] == "data: [DONE]"
    return [json.loads(p[len("data: ") :]) for p in parts[:-2]]


def _joined(chunks: list[dict], key: str) -> str:
    return "".join(c["choices"][0]["delta"].get(key) or "" for c in chunks if c["choices"])


@pytest.mark.parametrize(
    ("tokenizer", "reply"),
    [
        (OpensThinking(), "Hm, 2 + 2 is 4.\n</think>\n\nIt is 4."),
        (ModelOpensThinking(), "<think>Hm, 2 + 2 is 4.\n</think>\n\nIt is 4."),
    ],
    ids=["prompt-opens", "model-opens"],
)
def test_reasoning_is_split_from_the_answer_whole_and_streamed(tokenizer, reply):
    client, _ = _client(reply, tokenizer, reasoning_parser="auto")
    with client:
        r = client.post("/v1/chat/completions", json={"model": "x", "messages": MSGS})
        assert r.status_code == 200, r.text
        message = r.json()["choices"][0]["message"]
        assert message == {
            "role": "assistant",
            "content": "It is 4.",
            "reasoning_content": "Hm, 2 + 2 is 4.\n",
        }
        chunks = _stream(client)
    assert _joined(chunks, "reasoning_content") == "Hm, 2 + 2 is 4.\n"
    assert _joined(chunks, "content") == "It is 4."
    kinds = [k for c in chunks for k in c["choices"][0]["delta"] if k in ("reasoning_content", "content")]
    assert kinds == sorted(kinds, key=lambda k: k == "content"), "the reasoning comes first"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_without_a_reasoning_parser_the_thinking_is_the_answer():
    client, _ = _client("<think>hm</think>ok", ModelOpensThinking())
    with client:
        message = client.post("/v1/chat/completions", json={"model": "x", "messages": MSGS}).json()
    assert message["choices"][0]["message"] == {"role": "assistant", "content": "<think>hm</think>ok"}


def test_the_models_own_tool_calls_are_read_with_tool_choice_auto_and_no_grammar():
    client, engine = _client(
        f"I need the time.</think>Checking. {CALL}",
        OpensThinking(),
        reasoning_parser="deepseek_r1",
        tool_call_parser="hermes",
    )
    with client:
        r = client.post("/v1/chat/completions", json={"model": "x", "messages": MSGS, "tools": TOOLS})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        chunks = _stream(client, tools=TOOLS)
    assert engine.requests[0][1].grammar is None  # the model writes its own format, unconstrained
    message = choice["message"]
    assert choice["finish_reason"] == "tool_calls"
    assert message["reasoning_content"] == "I need the time." and message["content"] == "Checking."
    [call] = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "get_time", "arguments": '{"tz": "CET"}'}
    streamed = [
        c["choices"][0]["delta"]["tool_calls"] for c in chunks if c["choices"][0]["delta"].get("tool_calls")
    ]
    assert len(streamed) == 1 and streamed[0][0]["index"] == 0
    assert streamed[0][0]["function"] == {"name": "get_time", "arguments": '{"tz": "CET"}'}
    assert _joined(chunks, "reasoning_content") == "I need the time."
    assert _joined(chunks, "content") == "Checking. "
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_an_unparseable_call_is_text_not_an_error():
    broken = '<tool_call>{"name": "get_time", "arguments": {"tz": </tool_call>'
    client, _ = _client(broken, OpensThinking(), tool_call_parser="auto")
    with client:
        r = client.post("/v1/chat/completions", json={"model": "x", "messages": MSGS, "tools": TOOLS})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        chunks = _stream(client, tools=TOOLS)
    assert choice["message"] == {"role": "assistant", "content": broken} and choice["finish_reason"] == "stop"
    assert _joined(chunks, "content") == broken and chunks[-1]["choices"][0]["finish_reason"] == "stop"


def _event(i: int, text: str, special: bool = False, last: bool = False) -> TokenEvent:
    return TokenEvent(
        "r", i, 7, text, "" if special else text, None, special, generated_text="x" if last else None
    )


def test_special_marker_tokens_reach_the_tool_parser_and_nothing_else():
    mistral = resolve(None, "mistral", "[TOOL_CALLS]")
    tools = plan_tools(TOOLS, "auto")
    events = [
        _event(0, "[TOOL_CALLS]", special=True),
        _event(1, 'get_time{"tz": "CET"}'),
        _event(2, "</s>", special=True, last=True),
    ]
    assert [piece_of(e, mistral, tools) for e in events] == ["[TOOL_CALLS]", 'get_time{"tz": "CET"}', ""]
    assert output_text(events, mistral, tools) == '[TOOL_CALLS]get_time{"tz": "CET"}'
    assert piece_of(events[0], OutputParsers(), tools) == ""  # no parser: special tokens stay unseen
    stream = ChatOutputStream(mistral, tools)
    deltas = [d for i, e in enumerate(events) for d in stream.feed(piece_of(e, mistral, tools), i == 2)]
    assert [d["tool_calls"][0]["function"]["name"] for d in deltas] == ["get_time"] and stream.is_call


def test_reasoning_tokens_are_those_with_any_of_the_reasoning_or_its_tags():
    qwen3 = resolve("qwen3", None, "<think></think>")
    opened = OutputParsers(qwen3.reasoning, inside=True)
    pieces = ["<think>", "Hm", " ok</th", "ink>\n\nIt", " is", " 4", ""]
    assert reasoning_tokens(pieces, qwen3) == 4  # the token across the end tag counts
    assert reasoning_tokens(["a", "b</think>", "c", ""], opened) == 2
    assert reasoning_tokens(["<think>", "still", " thinking"], qwen3) == 3  # cut before the end tag
    assert reasoning_tokens(["It", " is", " 4", ""], qwen3) == 0  # did not reason
    assert reasoning_tokens(pieces, OutputParsers()) == 0  # no reasoning parser


def test_usage_counts_the_reasoning_tokens_on_chat_and_responses():
    reply = "Hm, 2 + 2 is 4.\n</think>\n\nIt is 4."
    reasoned = len("Hm, 2 + 2 is 4.\n</think>")  # a character is a token
    client, _ = _client(reply, OpensThinking(), reasoning_parser="auto")
    with client:
        whole = client.post("/v1/chat/completions", json={"model": "x", "messages": MSGS}).json()
        chunks = _stream(client, stream_options={"include_usage": True})
        response = client.post("/v1/responses", json={"input": "Hi"}).json()
        streamed = client.post("/v1/responses", json={"input": "Hi", "stream": True}).text
    assert whole["usage"]["completion_tokens"] == len(reply) + 1  # and EOS
    assert whole["usage"]["completion_tokens_details"] == {"reasoning_tokens": reasoned}
    assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": reasoned}
    assert response["usage"]["output_tokens_details"] == {"reasoning_tokens": reasoned}
    last = json.loads(streamed.split("\n\n")[-2].split("\n")[1].removeprefix("data: "))
    assert last["type"] == "response.completed"
    assert last["response"]["usage"]["output_tokens_details"] == {"reasoning_tokens": reasoned}
