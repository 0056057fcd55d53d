"""Anthropic's bodies and stream events from engine events: stop reasons, usage, content blocks, and the
event sequence of a text reply and of a tool call."""

from __future__ import annotations

import json

from anthropic_schemas import check_stream, parse_stream

from tgi.core.request import FinishReason, TokenEvent
from tgi.server.anthropic import format as fmt
from tgi.server.chat.tools import plan_tools

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def events(
    pieces: list[str], reason: FinishReason, stop: str | None = None, cached: int = 0
) -> list[TokenEvent]:
    out = [TokenEvent("r", i, 1, p, p, None, False) for i, p in enumerate(pieces)]
    last = out[-1]
    out[-1] = TokenEvent(
        "r",
        last.index,
        1,
        last.token_text,
        last.text,
        None,
        False,
        finish_reason=reason,
        generated_text="".join(pieces),
        stop_sequence=stop,
        num_cached_tokens=cached,
    )
    return out


def test_stop_reasons():
    final = events(["a", "b"], FinishReason.LENGTH)[-1]
    assert fmt.stop_reason(final, 2, False) == ("max_tokens", None)
    assert fmt.stop_reason(final, 5, False) == ("model_context_window_exceeded", None)  # the context ended it
    assert fmt.stop_reason(final, 2, True) == ("max_tokens", None)  # a call cut short
    assert fmt.stop_reason(events(["a"], FinishReason.EOS)[-1], 9, False) == ("end_turn", None)
    assert fmt.stop_reason(events(["a"], FinishReason.EOS)[-1], 9, True) == ("tool_use", None)
    assert fmt.stop_reason(events(["a"], FinishReason.STOP, "##")[-1], 9, False) == ("stop_sequence", "##")


def test_usage_splits_cached_prompt_tokens():
    assert fmt.usage(10, 3, 4) == {"input_tokens": 6, "output_tokens": 3, "cache_read_input_tokens": 4}


def test_content_blocks():
    plan = plan_tools([WEATHER], "auto")
    assert fmt.content(events(["Hi"], FinishReason.EOS), plan) == ([{"type": "text", "text": "Hi"}], False)
    assert fmt.content(events([""], FinishReason.EOS), None) == ([], False)
    call = events(['{"name": "get_weather", ', '"arguments": {"city": "Paris"}}'], FinishReason.EOS)
    [block], called = fmt.content(call, plan)
    assert called and block["type"] == "tool_use" and block["id"].startswith("toolu_")
    assert (block["name"], block["input"]) == ("get_weather", {"city": "Paris"})
    cut = '{"name": "get_weather", "arguments": {"city": "Pa'
    # no complete input: the text it is
    assert fmt.content(events([cut], FinishReason.LENGTH), plan) == ([{"type": "text", "text": cut}], False)


def stream(writer: fmt.EventWriter, evs: list[TokenEvent]) -> list[tuple[str, dict]]:
    frames = writer.start() + [f for e in evs for f in writer.feed(e)]
    out = parse_stream(b"".join(frames).decode())
    check_stream(out)
    return out


def test_text_stream():
    out = stream(
        fmt.EventWriter("m", 10, None, 9), events(["Hel", "", "lo"], FinishReason.STOP, "!", cached=2)
    )
    assert [n for n, _ in out] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert out[0][1]["message"]["usage"] == {
        "input_tokens": 10,
        "output_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert "".join(d["delta"]["text"] for n, d in out if n == "content_block_delta") == "Hello"
    delta = out[-2][1]
    assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "!"}
    assert delta["usage"] == {"input_tokens": 8, "output_tokens": 3, "cache_read_input_tokens": 2}


def test_empty_reply_has_no_block():
    out = stream(fmt.EventWriter("m", 1, None, 9), events([""], FinishReason.EOS))
    assert [n for n, _ in out] == ["message_start", "ping", "message_delta", "message_stop"]


def test_tool_call_stream():
    call = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    pieces = [call[:5], call[5:30], call[30:44], call[44:]]
    out = stream(fmt.EventWriter("m", 1, plan_tools([WEATHER], "auto"), 50), events(pieces, FinishReason.EOS))
    [start] = [d for n, d in out if n == "content_block_start"]
    block = start["content_block"]
    assert block["type"] == "tool_use" and block["name"] == "get_weather" and block["input"] == {}
    partial = "".join(d["delta"]["partial_json"] for n, d in out if n == "content_block_delta")
    assert json.loads(partial) == {"city": "Paris"}
    assert out[-2][1]["delta"]["stop_reason"] == "tool_use"
    # with tools, a text answer streams as text
    out = stream(
        fmt.EventWriter("m", 1, plan_tools([WEATHER], "auto"), 50), events([" ", "Sunny"], FinishReason.EOS)
    )
    assert "".join(d["delta"]["text"] for n, d in out if n == "content_block_delta") == " Sunny"
    assert out[-2][1]["delta"]["stop_reason"] == "end_turn"
