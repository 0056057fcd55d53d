"""Guided decoding and tool calling through the official clients against a real server (default launch)."""

from __future__ import annotations

import json
import re
import time

import jsonschema
import pytest

from tgi.core.testing.guided_cases import JSON_SCHEMAS, REGEXES

pytestmark = pytest.mark.e2e

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"}},
            "required": ["zone"],
        },
    },
}
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, CLOCK)}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


@pytest.fixture(scope="module")
def openai_client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="-", timeout=120, max_retries=0)


def test_tgi_client_grammars(server):
    from text_generation import Client
    from text_generation.types import Grammar, GrammarType

    client = Client(server.url, timeout=120)
    schema = JSON_SCHEMAS["recipe"]
    out = client.generate(
        "A recipe as JSON:", max_new_tokens=120, grammar=Grammar(type=GrammarType.Json, value=schema)
    )
    jsonschema.validate(json.loads(out.generated_text), schema)
    pattern, prompt = REGEXES["date"]
    streamed = list(
        client.generate_stream(
            prompt, max_new_tokens=20, grammar=Grammar(type=GrammarType.Regex, value=pattern)
        )
    )
    assert re.fullmatch(pattern, streamed[-1].generated_text)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openai_response_format(openai_client, stream):
    schema = JSON_SCHEMAS["person"]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
    kwargs = dict(model="tgi", messages=[{"role": "user", "content": "Invent a person."}], max_tokens=80)
    if stream:
        chunks = openai_client.chat.completions.create(**kwargs, response_format=fmt, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = openai_client.chat.completions.create(**kwargs, response_format=fmt).choices[0].message.content
    jsonschema.validate(json.loads(text), schema)
    any_object = openai_client.completions.create(
        model="tgi",
        prompt="A JSON object:",
        max_tokens=60,
        extra_body={"response_format": {"type": "json_object"}},
    )
    if any_object.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(any_object.choices[0].text), dict)


def _check_call(call) -> None:
    assert call.type == "function" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), PARAMETERS[call.function.name])


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_time"}}], ids=["required", "named"]
)
def test_openai_tool_calls(openai_client, choice):
    response = openai_client.chat.completions.create(
        model="tgi", messages=ASK, tools=[WEATHER, CLOCK], tool_choice=choice, max_tokens=80, temperature=0
    )
    result = response.choices[0]
    assert result.finish_reason == "tool_calls" and result.message.content is None
    [call] = result.message.tool_calls
    _check_call(call)
    if isinstance(choice, dict):
        assert call.function.name == "get_time"


def test_openai_tool_calls_streamed(openai_client):
    chunks = list(
        openai_client.chat.completions.create(
            model="tgi",
            messages=ASK,
            tools=[WEATHER, CLOCK],
            tool_choice="required",
            max_tokens=80,
            stream=True,
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert calls[0].id and calls[0].function.name in PARAMETERS and all(c.index == 0 for c in calls)
    assert all(c.id is None and c.function.name is None for c in calls[1:])
    arguments = "".join(c.function.arguments or "" for c in calls)
    jsonschema.validate(json.loads(arguments), PARAMETERS[calls[0].function.name])
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert not any(d.content for d in deltas)


def test_openai_tool_choice_auto_answers_in_text_or_a_valid_call(openai_client):
    for seed in range(3):
        result = openai_client.chat.completions.create(
            model="tgi", messages=ASK, tools=[WEATHER, CLOCK], max_tokens=60, seed=seed, temperature=1.0
        ).choices[0]
        if result.message.tool_calls:
            assert result.finish_reason in ("tool_calls", "length")
            if result.finish_reason == "tool_calls":
                _check_call(result.message.tool_calls[0])
        else:
            assert result.message.content and not result.message.content.lstrip().startswith("{")


def test_invalid_schema_is_refused_at_once(openai_client, server):
    import httpx
    import openai

    start = time.monotonic()
    with pytest.raises(openai.UnprocessableEntityError) as info:
        openai_client.chat.completions.create(
            model="tgi",
            messages=ASK,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "objekt"}},
            },
        )
    assert "objekt" in str(info.value) and time.monotonic() - start < 5
    r = httpx.post(
        server.url + "/generate",
        json={"inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "a(b"}}},
        timeout=30,
    )
    assert r.status_code == 422 and r.json()["error_type"] == "validation" and "regex" in r.json()["error"]
