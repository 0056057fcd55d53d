"""The API side of guided decoding: request fields to grammars, tool plans, tool calls read back (whole and
streamed), and the 422s, without a model (the fake engine refuses grammars as a backend without masks)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.core.guided import Grammar
from tgi.core.guided.grammar import closed
from tgi.server.app import create_app
from tgi.server.chat.tools import CallStream, message_for, plan_tools, render_inputs, split_call
from tgi.server.http.errors import ApiError
from tgi.server.service.settings import ServerSettings
from tgi.server.validation.grammars import DISABLED, one_grammar, response_format_grammar, tgi_grammar

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
MSGS = [{"role": "user", "content": "Hi"}]


def test_tgi_grammar_shapes():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert tgi_grammar({"type": "json", "value": schema}) == Grammar.json_schema(schema)
    assert tgi_grammar({"type": "json", "value": json.dumps(schema)}) == Grammar.json_schema(schema)
    assert tgi_grammar(
        {"type": "json_schema", "value": {"name": "x", "schema": schema}}
    ) == Grammar.json_schema(schema)
    assert tgi_grammar({"type": "regex", "value": "[0-9]+"}) == Grammar.regex("[0-9]+")
    for bad, where in [
        ({"type": "yaml", "value": "x"}, "grammar.type"),
        ({"type": "regex"}, "grammar"),
        ({"type": "regex", "value": 3}, "grammar.value"),
        ({"type": "json", "value": "{not json"}, "grammar.value"),
    ]:
        with pytest.raises(ApiError) as info:
            tgi_grammar(bad)
        assert info.value.status == 422 and info.value.param == where


def test_response_format_shapes():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert response_format_grammar(None) is None
    assert response_format_grammar({"type": "text"}) is None
    assert response_format_grammar({"type": "json_object"}) == Grammar.json_object()
    spec = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": True}}
    assert response_format_grammar(spec) == Grammar.json_schema(schema)
    assert response_format_grammar({"type": "regex", "value": "a+"}) == Grammar.regex("a+")  # TGI's shape
    with pytest.raises(ApiError, match="json_schema"):
        response_format_grammar({"type": "json_schema", "json_schema": {"schema": schema}})
    with pytest.raises(ApiError, match="both constrain"):
        one_grammar(("response_format", Grammar.json_object()), ("tools", Grammar.regex("x")))


def test_schemas_are_closed_unless_they_say_otherwise():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "object", "properties": {"b": {"type": "integer"}}}},
        "items": {"anyOf": [{"properties": {"c": {}}}]},
    }
    out = closed(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["a"]["additionalProperties"] is False
    assert out["items"]["anyOf"][0]["additionalProperties"] is False
    assert closed({"properties": {}, "additionalProperties": True})["additionalProperties"] is True
    assert closed({"type": "object"}) == {"type": "object"}  # any object stays any object


def test_tool_plans():
    assert plan_tools(None, None) is None
    auto = plan_tools([WEATHER, TIME], None)
    assert auto.choice == "auto" and auto.grammar.kind == "lark" and "%json" in auto.grammar.source
    required = plan_tools([WEATHER, TIME], "required")
    schema = json.loads(required.grammar.source)
    assert [c["properties"]["name"]["const"] for c in schema["anyOf"]] == ["get_weather", "get_time"]
    named = plan_tools([WEATHER, TIME], {"type": "function", "function": {"name": "get_time"}})
    assert named.choice == "named" and [f.name for f in named.functions] == ["get_time"]
    assert [f.name for f in named.shown] == ["get_weather", "get_time"]
    none = plan_tools([WEATHER], "none")
    assert none.grammar is None and not none.may_call and none.shown == []


@pytest.mark.parametrize(
    ("tools", "choice", "param"),
    [
        (None, "required", "tool_choice"),
        ([WEATHER], {"type": "function", "function": {"name": "nope"}}, "tool_choice"),
        ([WEATHER], "sometimes", "tool_choice"),
        ([{"type": "function", "function": {"name": "bad name!"}}], None, "tools[0].function.name"),
        ([{"type": "code_interpreter"}], None, "tools[0]"),
        ([WEATHER, WEATHER], None, "tools"),
        (
            [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
            None,
            "tools[0].function.parameters",
        ),
    ],
)
def test_bad_tools_are_422_naming_the_field(tools, choice, param):
    with pytest.raises(ApiError) as info:
        plan_tools(tools, choice)
    assert info.value.status == 422 and info.value.param == param


def test_tools_reach_the_prompt():
    plan = plan_tools([WEATHER], "auto")
    # a template that knows no tools: the instruction and the schemas go in a system message
    messages, kwargs = render_inputs(MSGS, plan, "{{ messages }}", None)
    assert kwargs == {} and messages[0]["role"] == "system" and "get_weather" in messages[0]["content"]
    messages, _ = render_inputs([{"role": "system", "content": "Be brief."}, *MSGS], plan, "", "Use a tool.")
    assert messages[0]["content"].startswith("Be brief.\n\nUse a tool.") and len(messages) == 2
    # a template that renders tools gets them as its `tools` argument
    messages, kwargs = render_inputs(MSGS, plan, "{% for t in tools %}{% endfor %}", None)
    assert messages == MSGS and kwargs["tools"][0]["function"]["name"] == "get_weather"
    # an earlier call is written as the JSON the model is asked for, when the template cannot render it
    call = {
        "role": "assistant",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
    }
    messages, _ = render_inputs([call], None, "", None)
    assert json.loads(messages[0]["content"]) == {"name": "f", "arguments": {"x": 1}}


def test_calls_read_back():
    plan = plan_tools([WEATHER], "auto")
    text = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert split_call(text) == ("get_weather", '{"city": "Paris"}')
    assert split_call('{"name": "get_weather", "arguments": {"ci') == ("get_weather", '{"ci')  # cut short
    message, called = message_for(text, plan)
    assert called and message["content"] is None
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert message_for("It is sunny.", plan) == ({"role": "assistant", "content": "It is sunny."}, False)
    assert message_for(text, plan_tools([WEATHER], "none"))[1] is False


@pytest.mark.parametrize("pieces", [None, 1, 3])
def test_streamed_calls_reassemble(pieces):
    text = '{"name": "get_weather", "arguments": {"city": "Paris", "days": {"n": 2}}}'
    chunks = [text] if pieces is None else [text[i : i + pieces] for i in range(0, len(text), pieces)]
    stream = CallStream(plan_tools([WEATHER], "auto"))
    deltas = [d for i, c in enumerate(chunks) for d in stream.feed(c, i == len(chunks) - 1)]
    assert stream.is_call
    head = deltas[0]["tool_calls"][0]
    assert head["function"] == {"name": "get_weather", "arguments": ""} and head["id"].startswith("call_")
    args = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas[1:])
    assert json.loads(args) == {"city": "Paris", "days": {"n": 2}}


def test_streamed_text_answers_pass_through():
    stream = CallStream(plan_tools([WEATHER], "auto"))
    out = stream.feed("  ", False) + stream.feed("Hello", False) + stream.feed(" there", True)
    assert "".join(d["content"] for d in out) == "  Hello there" and not stream.is_call


def client(**settings):
    return TestClient(create_app(FakeEngine(), ServerSettings(**settings)))


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/generate",
            {"inputs": "Hi", "parameters": {"grammar": {"type": "regex", "value": "a+"}}},
            "parameters.grammar",
        ),
        (
            "/v1/chat/completions",
            {"messages": MSGS, "response_format": {"type": "json_object"}},
            "response_format",
        ),
        ("/v1/chat/completions", {"messages": MSGS, "tools": [WEATHER], "tool_choice": "required"}, "tools"),
        ("/v1/completions", {"prompt": "Hi", "guided_regex": "a+"}, "guided_regex"),
    ],
)
def test_grammar_refusals(path, body, param):
    with client(disable_grammar_support=True) as c:
        r = c.post(path, json=body)
        assert r.status_code == 422 and DISABLED in r.text, r.text
    with client() as c:  # a backend that cannot apply masks says so, by name, before anything is queued
        r = c.post(path, json=body)
        assert r.status_code == 422 and "cannot apply grammar masks" in r.text, r.text
        if path.startswith("/v1"):
            assert r.json()["error"]["param"] == param
    with client() as c:  # `tool_choice: none` constrains nothing, so the fake engine serves it
        r = c.post("/v1/chat/completions", json={"messages": MSGS, "tools": [WEATHER], "tool_choice": "none"})
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length")
