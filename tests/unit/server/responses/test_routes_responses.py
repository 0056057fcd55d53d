"""OpenAI Responses routes against the fake engine: the response body, usage and status, the prompt the model
sees (instructions, items, a stored conversation), the typed event stream, the store's routes, and every
unserved field refused by name in OpenAI's error shape (reasoning, the model's own calls and a failure mid-stream:
test_routes_responses_parsing.py)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from responses_events import events_of, prompt_of

from fake_engine import REPLY, conversation_engine, error_of
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

PATH = "/v1/responses"


@pytest.fixture
def engine():
    """Room for conversations of a few turns (a character is a token)."""
    return conversation_engine()


@pytest.fixture
def client(engine):
    with TestClient(create_app(engine)) as c:
        yield c


def test_a_string_input_gets_a_message_with_usage(client, engine):
    r = client.post(PATH, json={"model": "x", "input": "Hi", "instructions": "Be brief.", "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "response" and body["id"].startswith("resp_") and body["status"] == "completed"
    [item] = body["output"]
    assert item["type"] == "message" and item["role"] == "assistant" and item["status"] == "completed"
    assert item["content"] == [{"type": "output_text", "text": REPLY, "annotations": [], "logprobs": []}]
    prompt = "<system>Be brief.<user>Hi<assistant>"
    assert prompt_of(engine) == prompt and engine.requests[0][1].is_greedy
    assert body["usage"] == {
        "input_tokens": len(prompt),
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": len(REPLY) + 1,  # and EOS
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": len(prompt) + len(REPLY) + 1,
    }
    assert (
        body["instructions"] == "Be brief." and body["store"] is True and body["incomplete_details"] is None
    )


def test_max_output_tokens_cuts_it_incomplete(client, engine):
    body = client.post(PATH, json={"input": "Hi", "max_output_tokens": 5, "top_p": 0.5}).json()
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert (
        body["output"][0]["status"] == "incomplete" and body["output"][0]["content"][0]["text"] == REPLY[:5]
    )
    params = engine.requests[0][1]
    assert params.max_new_tokens == 5 and params.top_p == 0.5 and params.do_sample
    assert body["max_output_tokens"] == 5 and body["top_p"] == 0.5


def test_input_items_become_the_conversation(client, engine):
    items = [
        {"role": "developer", "content": "Rules."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": '{"x": 1}', "id": "fc_1"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {
            "role": "assistant",
            "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}],
        },
        {"role": "user", "content": "Thanks"},
    ]
    assert client.post(PATH, json={"input": items, "max_output_tokens": 2}).status_code == 200
    call = '{"name": "f", "arguments": {"x": 1}}'  # the fake's template renders no tool_calls
    expected = f"<system>Rules.<user>Weather?<assistant>{call}<tool>sunny<assistant>It is sunny.<user>Thanks"
    assert prompt_of(engine) == expected + "<assistant>"


def test_an_output_for_no_call_is_refused(client):
    r = client.post(PATH, json={"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]})
    assert r.status_code == 422 and r.json()["error"]["param"] == "input[0].call_id"


def test_previous_response_id_continues_the_stored_conversation(client, engine):
    first = client.post(
        PATH, json={"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 5}
    ).json()
    second = client.post(PATH, json={"input": "More", "previous_response_id": first["id"]}).json()
    # the previous instructions are not carried over (as OpenAI's); its input and output are
    assert prompt_of(engine) == "<user>Hi<assistant>Hello<user>More<assistant>"
    assert second["previous_response_id"] == first["id"]
    third = client.post(
        PATH, json={"input": "Again", "previous_response_id": second["id"], "instructions": "I"}
    )
    assert third.status_code == 200
    assert (
        prompt_of(engine)
        == f"<system>I<user>Hi<assistant>Hello<user>More<assistant>{REPLY}<user>Again<assistant>"
    )


def test_a_partial_assistant_message_is_continued_and_stored_as_one_message(client, engine):
    partial = {"role": "assistant", "content": "Well,", "status": "incomplete"}
    body = {"input": [{"role": "user", "content": "Hi"}, partial], "reasoning": {"effort": "low"}}
    first = client.post(PATH, json=body).json()
    assert prompt_of(engine) == "<user>Hi<assistant>Well,"  # left open for the output to go on
    assert first["output"][0]["content"][0]["text"] == REPLY and first["reasoning"]["effort"] == "low"
    client.post(PATH, json={"input": "More", "previous_response_id": first["id"]})
    assert prompt_of(engine) == f"<user>Hi<assistant>Well,{REPLY}<user>More<assistant>"


def test_retrieve_and_delete(client):
    body = client.post(PATH, json={"input": "Hi", "max_output_tokens": 3, "metadata": {"k": "v"}}).json()
    assert body["metadata"] == {"k": "v"}
    assert client.get(f"{PATH}/{body['id']}").json() == body
    assert client.delete(f"{PATH}/{body['id']}").json() == {
        "id": body["id"],
        "object": "response.deleted",
        "deleted": True,
    }
    for r in (client.get(f"{PATH}/{body['id']}"), client.delete(f"{PATH}/{body['id']}")):
        assert r.status_code == 404 and error_of(r, PATH)[1] == "invalid_request_error"
    r = client.post(PATH, json={"input": "Hi", "previous_response_id": body["id"]})
    assert r.status_code == 404 and r.json()["error"]["param"] == "previous_response_id"


def test_store_false_keeps_nothing(client):
    body = client.post(PATH, json={"input": "Hi", "max_output_tokens": 2, "store": False}).json()
    assert body["store"] is False and client.get(f"{PATH}/{body['id']}").status_code == 404


def test_a_server_that_keeps_no_responses_refuses_store_by_name(engine):
    with TestClient(create_app(engine, ServerSettings(responses_store_max_entries=0))) as c:
        body = c.post(PATH, json={"input": "Hi", "max_output_tokens": 2}).json()
        assert body["store"] is False and c.get(f"{PATH}/{body['id']}").status_code == 404
        for field, value in (("store", True), ("previous_response_id", body["id"])):
            r = c.post(PATH, json={"input": "Hi", field: value})
            assert r.status_code == 422 and r.json()["error"]["param"] == field
            assert "--responses-store-max-entries" in r.json()["error"]["message"]


def test_retrieve_refuses_a_stream_by_name(client):
    body = client.post(PATH, json={"input": "Hi", "max_output_tokens": 2}).json()
    assert client.get(f"{PATH}/{body['id']}?stream=false").status_code == 200
    r = client.get(f"{PATH}/{body['id']}?stream=true")
    assert r.status_code == 422 and r.json()["error"]["param"] == "stream"


def test_streamed_events(client):
    r = client.post(PATH, json={"input": "Hi", "stream": True, "max_output_tokens": 5})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = events_of(r.text)
    kinds = [e["type"] for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 5,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    item_id = events[2]["item"]["id"]
    assert all(e["item_id"] == item_id for e in events[3:-2])
    assert "".join(e["delta"] for e in events if e["type"].endswith(".delta")) == REPLY[:5]
    final = events[-1]["response"]
    assert final["status"] == "incomplete" and final["output"] == [events[-2]["item"]]
    assert final["output"][0]["content"][0]["text"] == REPLY[:5] and final["usage"]["output_tokens"] == 5
    assert client.get(f"{PATH}/{final['id']}").json() == final


def test_a_streamed_answer_to_its_end_completes(client):
    events = events_of(client.post(PATH, json={"input": "Hi", "stream": True}).text)
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["status"] == "completed"
    assert events[-3]["type"] == "response.content_part.done" and events[-3]["part"]["text"] == REPLY


def test_tool_choice_none_shows_no_tools(client, engine):
    tool = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    body = client.post(PATH, json={"input": "Hi", "tools": [tool], "tool_choice": "none"}).json()
    assert (
        body["output"][0]["type"] == "message" and body["tools"] == [tool] and body["tool_choice"] == "none"
    )
    assert prompt_of(engine) == "<user>Hi<assistant>"


def _image(**part) -> dict:
    return {"input": [{"role": "user", "content": [{"type": "input_image", **part}]}]}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        (
            {"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "file_search"}},
            "tool_choice",
        ),
        ({"tools": [{"type": "function", "name": "f"}], "tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"background": True}, "background"),
        ({"reasoning": {"summary": "auto"}}, "reasoning.summary"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"truncation": "auto"}, "truncation"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"text": {"verbosity": "high"}}, "text.verbosity"),
        ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        (
            {"input": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]}]},
            "input[0].summary",
        ),
        (
            {"input": [{"type": "reasoning", "content": [{"type": "input_text", "text": "s"}]}]},
            "input[0].content[0].type",
        ),
        (_image(image_url="u"), "input[0].content[0].image_url"),  # a text-only model takes no images
        (_image(file_id="file_1"), "input[0].content[0].file_id"),
        (_image(image_url="u", detail="high"), "input[0].content[0].detail"),
        (
            {"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input[0].arguments"),
    ],
)
def test_unserved_fields_are_refused_by_name(client, engine, fields, param):
    r = client.post(PATH, json={"input": "Hi", **fields})
    assert r.status_code == 422, r.text
    _message, kind = error_of(r, PATH)
    assert r.json()["error"]["param"] == param and kind == "invalid_request_error"
    assert engine.requests == []


@pytest.mark.parametrize(
    "fields",
    [
        {"text": {"format": {"type": "json_object"}}},
        {"tools": [{"type": "function", "name": "f"}], "tool_choice": "required"},
    ],
)
def test_a_grammar_reaches_the_engine_validation(client, fields):
    """The fake engine has no grammar masks: its refusal, naming the field, shows the grammar reached it."""
    r = client.post(PATH, json={"input": "Hi", **fields})
    assert r.status_code == 422 and r.json()["error"]["param"] == (
        "text.format" if "text" in fields else "tools"
    )


def test_neutral_values_of_unserved_fields_pass(client):
    fields = {
        "background": False,
        "truncation": "disabled",
        "service_tier": "auto",
        "include": [],
        "store": True,
    }
    assert client.post(PATH, json={"input": "Hi", "max_output_tokens": 2, **fields}).status_code == 200
