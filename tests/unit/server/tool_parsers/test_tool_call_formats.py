"""Each model family's tool-call format read from recorded model outputs: whole, and streamed in awkward
pieces (one character at a time, markers cut in two), the stream giving what the whole output gives;
unparseable calls come back as text."""

from __future__ import annotations

import json
import random

import pytest

from tgi.server.tool_parsers import TOOL_CALL_FORMATS, ToolCall, ToolCallStream

WEATHER = ToolCall("get_weather", json.dumps({"city": "Paris", "unit": "celsius"}))
TIME = ToolCall("get_time", json.dumps({"tz": "CET"}))

# (format, output, text, calls): outputs as Qwen2.5 / Hermes-2-Pro, Llama 3.1-3.3 and Mistral write them
RECORDED = [
    (
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>',
        "",
        [WEATHER],
    ),
    (
        "hermes",
        "Let me check both.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>',
        "Let me check both.\n\n",
        [WEATHER, TIME],
    ),
    ("hermes", "It is 4 <b>degrees</b> < 5.", "It is 4 <b>degrees</b> < 5.", []),
    (
        "hermes",  # unclosed at the end of the output (stopped at EOS): still a call when it parses
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n',
        "",
        [TIME],
    ),
    (
        "hermes",  # unparseable: text, as it was
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": \n</tool_call>',
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": \n</tool_call>',
        [],
    ),
    (
        "llama3_json",
        '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}',
        "",
        [WEATHER],
    ),
    (
        "llama3_json",
        '<|python_tag|>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}; '
        '{"name": "get_time", "parameters": {"tz": "CET"}}',
        "",
        [WEATHER, TIME],
    ),
    ("llama3_json", "The weather in Paris is mild.", "The weather in Paris is mild.", []),
    ("llama3_json", '{"answer": 4, "name": 3}', '{"answer": 4, "name": 3}', []),  # JSON, not a call
    (
        "llama3_json",
        '{"name": "get_time", "parameters": {"tz"',
        '{"name": "get_time", "parameters": {"tz"',
        [],
    ),
    (
        "mistral",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}, '
        '{"name": "get_time", "arguments": {"tz": "CET"}}]',
        "",
        [WEATHER, TIME],
    ),
    (
        "mistral",
        'Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "celsius"}'
        '[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}',
        "Checking.",
        [WEATHER, TIME],
    ),
    ("mistral", "No tools needed: [TOOLS] are listed.", "No tools needed: [TOOLS] are listed.", []),
    ("mistral", '[TOOL_CALLS][{"arguments": {}}]', '[TOOL_CALLS][{"arguments": {}}]', []),
]


def _merged(segments) -> list:
    out: list = []
    for s in segments:
        if isinstance(s, str) and out and isinstance(out[-1], str):
            out[-1] += s
        elif s != "":
            out.append(s)
    return out


def _chunkings(text: str):
    yield [text]
    yield list(text)
    rng = random.Random(1)
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 8))))
        yield [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize(("name", "output", "text", "calls"), RECORDED)
def test_recorded_output_whole_and_streamed(name, output, text, calls):
    fmt = TOOL_CALL_FORMATS[name]
    parsed = fmt.parse(output)
    assert (parsed.content, parsed.calls) == (text, calls)
    whole = _merged(fmt.scan(output, True, "start")[0])
    for pieces in _chunkings(output):
        stream = ToolCallStream(fmt)
        got = [s for i, p in enumerate(pieces) for s in stream.feed(p, i == len(pieces) - 1)]
        assert _merged(got) == whole, pieces


def test_a_call_is_given_once_it_is_complete_and_text_before_it_at_once():
    stream = ToolCallStream(TOOL_CALL_FORMATS["hermes"])
    assert stream.feed("Sure. <tool") == ["Sure. "]
    assert stream.feed('_call>{"name": "get_time", "arguments": {"tz": "CET"}}') == []
    assert stream.feed("</tool_call>") == [TIME]
    stream = ToolCallStream(TOOL_CALL_FORMATS["mistral"])
    assert stream.feed("[TOOL_CALLS]get_time[AR") == []
    assert stream.feed('GS]{"tz": "CET"}') == [TIME]
