"""The official `anthropic` client against a real server: `/v1/messages` streamed and not (greedy text equal
to the engine's own), a `tool_use` round trip, `count_tokens`, errors, the key as `x-api-key`; bodies and
the stream's events checked against Anthropic's schemas (`tests/helpers/anthropic_schemas.py`)."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from anthropic_schemas import ERROR, MESSAGE, check_stream, parse_stream
from e2e_server import KEY

pytestmark = pytest.mark.e2e

N = 6  # the greedy answer is longer: it stops at max_tokens
# the client (2.x) has no sampling arguments any more; the API's `temperature` is sent as an extra field
GREEDY = {"temperature": 0}
ASK = [{"role": "user", "content": "What is the capital of France?"}]
SYSTEM = "You are a helpful assistant."
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
    },
}
WEATHER_ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


@pytest.fixture(scope="module")
def client(server):
    import anthropic

    return anthropic.Anthropic(base_url=server.url, api_key="-", timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def prompt_ids(reference):
    tok = reference.tokenizer
    messages = [{"role": "system", "content": SYSTEM}, *ASK]
    return tok.encode(
        tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
        add_special_tokens=False,
    )


def test_create_is_the_engines_greedy_text(client, reference, prompt_ids):
    raw = client.messages.with_raw_response.create(
        model="tgi", max_tokens=N, system=SYSTEM, messages=ASK, extra_body=GREEDY
    )
    jsonschema.validate(raw.http_response.json(), MESSAGE)
    message = raw.parse()
    [block] = message.content
    assert block.type == "text" and block.text == reference(prompt_ids, N)
    assert message.stop_reason == "max_tokens" and message.stop_sequence is None
    assert message.usage.output_tokens == N
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == len(prompt_ids)
    # system as text blocks, and the content as a text block: the same prompt
    same = client.messages.create(
        model="tgi",
        max_tokens=N,
        system=[{"type": "text", "text": SYSTEM}],
        messages=[{"role": "user", "content": [{"type": "text", "text": ASK[0]["content"]}]}],
        extra_body=GREEDY,
    )
    assert same.content[0].text == block.text


def test_stop_sequence_and_end_turn(client, reference, prompt_ids):
    text = reference(prompt_ids, N)
    word = text.split()[2]
    message = client.messages.create(
        model="tgi",
        max_tokens=N,
        system=SYSTEM,
        messages=ASK,
        extra_body=GREEDY,
        stop_sequences=["never seen", word],
    )
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == word
    assert message.content[0].text == text[: text.index(word)]
    ended = client.messages.create(
        model="tgi", max_tokens=200, system=SYSTEM, messages=ASK, extra_body=GREEDY
    )
    assert ended.stop_reason == "end_turn" and ended.usage.output_tokens < 200


def test_stream_events_and_text(client, server, reference, prompt_ids):
    expected = reference(prompt_ids, N)
    kwargs = dict(model="tgi", max_tokens=N, system=SYSTEM, messages=ASK, extra_body=GREEDY)
    with client.messages.stream(**kwargs) as stream:
        assert "".join(stream.text_stream) == expected
        final = stream.get_final_message()
    assert final.content[0].text == expected and final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == N
    # the client's own typed events, in Anthropic's order
    kinds = [e.type for e in client.messages.create(**kwargs, stream=True)]
    assert kinds[0] == "message_start" and kinds[1] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    # the raw stream (ping included) against the events' schemas
    raw = {k: v for k, v in kwargs.items() if k != "extra_body"}
    r = httpx.post(server.url + "/v1/messages", json={**raw, **GREEDY, "stream": True}, timeout=120)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_stream(r.text)
    check_stream(events)
    assert "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta") == expected


def _check_input(block) -> None:
    assert block.type == "tool_use" and block.id.startswith("toolu_") and block.name == "get_weather"
    jsonschema.validate(block.input, WEATHER["input_schema"])


def test_tool_use_round_trip(client):
    first = client.messages.with_raw_response.create(
        model="tgi",
        max_tokens=80,
        messages=WEATHER_ASK,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        extra_body=GREEDY,
    )
    jsonschema.validate(first.http_response.json(), MESSAGE)
    first = first.parse()
    assert first.stop_reason == "tool_use"
    [call] = first.content
    _check_input(call)
    result = {"type": "tool_result", "tool_use_id": call.id, "content": "18 degrees and sunny"}
    history = [
        *WEATHER_ASK,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [result]},
    ]
    final = client.messages.create(
        model="tgi",
        max_tokens=40,
        messages=history,
        tools=[WEATHER],
        tool_choice={"type": "none"},
        extra_body=GREEDY,
    )
    assert final.stop_reason in ("end_turn", "max_tokens")
    [answer] = final.content
    assert answer.type == "text" and answer.text
    # the tool's result and the call reached the prompt
    asked = client.messages.count_tokens(model="tgi", messages=WEATHER_ASK, tools=[WEATHER]).input_tokens
    answered = client.messages.count_tokens(model="tgi", messages=history, tools=[WEATHER]).input_tokens
    assert answered > asked


def test_tool_use_streamed(client):
    kwargs = dict(model="tgi", max_tokens=80, messages=WEATHER_ASK, tools=[WEATHER], extra_body=GREEDY)
    events = list(
        client.messages.create(**kwargs, tool_choice={"type": "tool", "name": "get_weather"}, stream=True)
    )
    starts = [e for e in events if e.type == "content_block_start"]
    assert [s.content_block.type for s in starts] == ["tool_use"]
    partial = "".join(e.delta.partial_json for e in events if e.type == "content_block_delta")
    jsonschema.validate(json.loads(partial), WEATHER["input_schema"])
    assert [e.delta.stop_reason for e in events if e.type == "message_delta"] == ["tool_use"]
    with client.messages.stream(**kwargs, tool_choice={"type": "any"}) as stream:
        final = stream.get_final_message()
    _check_input(final.content[0])


def test_count_tokens(client, prompt_ids):
    counted = client.messages.count_tokens(model="tgi", system=SYSTEM, messages=ASK)
    assert counted.input_tokens == len(prompt_ids)


def test_errors_in_anthropics_shape(client, server):
    import anthropic

    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="tgi", max_tokens=5, messages=[{"role": "user", "content": [image]}])
    assert refused.value.status_code == 400
    jsonschema.validate(refused.value.body, ERROR)
    assert refused.value.body["error"]["type"] == "invalid_request_error" and "image" in refused.value.message
    with pytest.raises(anthropic.BadRequestError, match="thinking"):
        client.messages.create(
            model="tgi", max_tokens=5, messages=ASK, thinking={"type": "enabled", "budget_tokens": 1024}
        )
    r = httpx.post(server.url + "/v1/messages", json={"model": "tgi", "messages": ASK}, timeout=30)
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    jsonschema.validate(r.json(), ERROR)


def test_api_key_as_x_api_key(keyed_server):
    """On the session's keyed server (`--api-key s3cret`)."""
    import anthropic

    as_header = anthropic.Anthropic(
        base_url=keyed_server.url,
        api_key=None,
        default_headers={"x-api-key": KEY},
        timeout=120,
        max_retries=0,
    )
    assert as_header.messages.count_tokens(model="tgi", messages=ASK).input_tokens > 0
    as_bearer = anthropic.Anthropic(base_url=keyed_server.url, auth_token=KEY, timeout=120, max_retries=0)
    assert as_bearer.messages.create(model="tgi", max_tokens=2, messages=ASK).usage.output_tokens <= 2
    wrong = anthropic.Anthropic(
        base_url=keyed_server.url,
        api_key=None,
        default_headers={"x-api-key": "nope"},
        timeout=120,
        max_retries=0,
    )
    with pytest.raises(anthropic.AuthenticationError) as refused:
        wrong.messages.count_tokens(model="tgi", messages=ASK)
    assert refused.value.body["error"]["type"] == "authentication_error"
