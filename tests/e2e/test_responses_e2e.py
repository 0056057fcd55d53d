"""OpenAI Responses through the official `openai` client against a real server (default launch): bodies and
every stream event parsed by the client's own models, greedy text as chat completions', a function tool
round trip, `text.format` JSON schema checked with jsonschema, `previous_response_id` chaining, retrieve
and delete, and refusals by name."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from helpers.openai_responses import validated_events, validated_response

from tgi.core.testing.guided_cases import JSON_SCHEMAS

pytestmark = pytest.mark.e2e

WEATHER = {
    "type": "function",
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
}
ASK = "What is the weather like in Paris today?"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
MESSAGE_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="-", timeout=120, max_retries=0)


def _deduplicated(kinds: list[str]) -> list[str]:
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]


def test_greedy_text_is_chat_completions_text(client, server):
    chat = client.chat.completions.create(model="tgi", messages=QUESTION, max_tokens=12, temperature=0)
    r = httpx.post(
        server.url + "/v1/responses",
        json={"model": "tgi", "input": QUESTION, "max_output_tokens": 12, "temperature": 0},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    response = validated_response(r.json())
    assert response.output_text == chat.choices[0].message.content
    assert response.object == "response" and response.id.startswith("resp_")
    usage = response.usage
    assert (
        usage.input_tokens == chat.usage.prompt_tokens and usage.output_tokens == chat.usage.completion_tokens
    )
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    incomplete = chat.choices[0].finish_reason == "length"
    assert response.status == ("incomplete" if incomplete else "completed")
    if incomplete:
        assert response.incomplete_details.reason == "max_output_tokens"


def test_streamed_text(client):
    kwargs = dict(model="tgi", input="Name three colours.", instructions="Answer briefly.", temperature=0)
    whole = client.responses.create(max_output_tokens=16, **kwargs)
    events = validated_events(client, max_output_tokens=16, **kwargs)
    kinds = [e.type for e in events]
    last = "response.incomplete" if whole.status == "incomplete" else "response.completed"
    assert _deduplicated(kinds) == [*MESSAGE_EVENTS, last]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-1].response.output_text
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == text and events[-1].response.usage.output_tokens == whole.usage.output_tokens


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_text_format_json_schema(client, stream):
    schema = JSON_SCHEMAS["person"]
    kwargs = dict(
        model="tgi",
        input="Invent a person.",
        max_output_tokens=80,
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}},
    )
    if stream:
        text = validated_events(client, **kwargs)[-1].response.output_text
    else:
        text = client.responses.create(**kwargs).output_text
    jsonschema.validate(json.loads(text), schema)


def test_function_tool_round_trip(client):
    first = client.responses.create(
        model="tgi", input=ASK, tools=[WEATHER], tool_choice="required", max_output_tokens=60, temperature=0
    )
    assert first.status == "completed"
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees and sunny"}
    second = client.responses.create(
        model="tgi",
        previous_response_id=first.id,
        input=[answer],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=20,
        temperature=0,
    )
    assert second.output[0].type == "message" and second.output_text
    # the same turn given whole, without the store: the same prompt
    manual = client.responses.create(
        model="tgi",
        input=[{"role": "user", "content": ASK}, call.model_dump(exclude_none=True), answer],
        tools=[WEATHER],
        tool_choice="none",
        max_output_tokens=20,
        temperature=0,
        store=False,
    )
    assert manual.usage.input_tokens == second.usage.input_tokens and manual.output_text == second.output_text


def test_function_call_streamed(client):
    events = validated_events(
        client,
        model="tgi",
        input=ASK,
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    kinds = _deduplicated([e.type for e in events])
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    jsonschema.validate(json.loads(arguments), WEATHER["parameters"])
    [item] = events[-1].response.output
    assert item.type == "function_call" and item.arguments == arguments and item.name == "get_weather"


def test_previous_response_id_retrieve_and_delete(client):
    import openai

    first = client.responses.create(model="tgi", input="My name is Ada.", max_output_tokens=8, temperature=0)
    stored = client.responses.retrieve(first.id)
    assert stored.model_dump() == first.model_dump()
    second = client.responses.create(
        model="tgi",
        previous_response_id=first.id,
        input="What is my name?",
        max_output_tokens=8,
        temperature=0,
    )
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="tgi", previous_response_id=first.id, input="And now?")
    assert info.value.body["param"] == "previous_response_id"
    unstored = client.responses.create(model="tgi", input="Hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"background": True}, "background"),
        ({"max_tool_calls": 3}, "max_tool_calls"),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"truncation": "auto"}, "truncation"),
        (  # this server's model takes no images
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}
                ]
            },
            "input[0].content[0].image_url",
        ),
    ],
)
def test_unserved_fields_are_refused_by_name(client, fields, param):
    import openai

    kwargs = {"model": "tgi", "input": "Hi", **fields}
    with pytest.raises(openai.UnprocessableEntityError) as info:
        client.responses.create(**kwargs)
    assert info.value.body["param"] == param
