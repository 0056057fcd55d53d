"""OpenAI Responses routes against the fake engine: the response body, usage and status, the prompt the model
sees (instructions, items, a stored conversation), the typed event stream, the store's routes, and every
unserved field refused by name in OpenAI's error shape."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fake_engine import REPLY, CharTokenizer, FakeEngine, error_of
from tgi.core.config import EngineConfig
from tgi.core.request import EngineError
from tgi.server.app import create_app
from tgi.server.settings import ServerSettings

PATH = "/v1/responses"


@pytest.fixture
def engine():
    """Room for conversations of a few turns (a character is a token)."""
    limits = dict(max_input_tokens=400, max_total_tokens=512, max_batch_prefill_tokens=512)
    return FakeEngine(config=EngineConfig(model_id="fake/model", max_batch_total_tokens=2048, **limits))


@pytest.fixture
def client(engine):
    with TestClient(create_app(engine)) as c:
        yield c


def prompt_of(engine: FakeEngine, k: int = -1) -> str:
    return "".join(chr(t) for t in engine.requests[k][0])


def events_of(text: str) -> list[dict]:
    """The stream's events, after checking each is framed `event: <type>` / `data: <json>`."""
    out = []
    for block in text.split("\n\n")[:-1]:
        head, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert head == f"event: {event['type']}"
        out.append(event)
    assert text.endswith("\n\n") and [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


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
        ({"reasoning": {"effort": "low"}}, "reasoning"),
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


class OpensThinking(CharTokenizer):
    """A template that opens the reasoning in its generation prompt (DeepSeek-R1's way) and teaches Hermes
    tool calls."""

    chat_template = (
        "{{ tools }} <tool_call></tool_call> {% for m in messages %}{{ m.content }}{% endfor %}<think>"
    )

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **_):
        return super().apply_chat_template(messages, tokenize, add_generation_prompt) + "<think>"


TIME = {
    "type": "function",
    "name": "get_time",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
}


def parsed_client(reply: str) -> tuple[TestClient, FakeEngine]:
    limits = dict(max_input_tokens=400, max_total_tokens=512, max_batch_prefill_tokens=512)
    config = EngineConfig(model_id="fake/model", max_batch_total_tokens=2048, **limits)
    engine = FakeEngine(config=config, reply=reply, tokenizer=OpensThinking())
    settings = ServerSettings(reasoning_parser="deepseek_r1", tool_call_parser="hermes")
    return TestClient(create_app(engine, settings)), engine


def test_reasoning_and_the_models_own_calls_are_output_items_whole_and_streamed():
    call = '<tool_call>{"name": "get_time", "arguments": {"tz": "CET"}}</tool_call>'
    client, engine = parsed_client(f"I need the time.</think>Checking. {call}")
    with client:
        body = client.post(PATH, json={"input": "Time?", "tools": [TIME]}).json()
        events = events_of(client.post(PATH, json={"input": "Time?", "tools": [TIME], "stream": True}).text)
        again = client.post(PATH, json={"input": "Thanks", "previous_response_id": body["id"]})
    assert engine.requests[0][1].grammar is None  # tool_choice auto: the model writes its own format
    for output in (body["output"], events[-1]["response"]["output"]):
        assert [i["type"] for i in output] == ["reasoning", "message", "function_call"]
        assert output[0]["content"] == [{"type": "reasoning_text", "text": "I need the time."}]
        assert output[1]["content"][0]["text"].strip() == "Checking."
        assert (output[2]["name"], output[2]["arguments"]) == ("get_time", '{"tz": "CET"}')
    reasoning = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert reasoning == "I need the time."
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0, 1, 2]
    assert again.status_code == 200, again.text


def test_a_reasoning_input_item_is_the_next_assistant_messages_reasoning(engine):
    items = [
        {"role": "user", "content": "Hi"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "hm"}],
        },
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ]
    with TestClient(create_app(engine)) as c:
        assert c.post(PATH, json={"input": items, "max_output_tokens": 2}).status_code == 200
    assert (
        prompt_of(engine) == "<user>Hi<assistant>Hello<user>Bye<assistant>"
    )  # the fake template shows no reasoning


def test_parallel_tool_calls_false_is_refused_where_the_model_writes_its_own_calls():
    client, engine = parsed_client("ok")
    with client:
        r = client.post(PATH, json={"input": "Time?", "tools": [TIME], "parallel_tool_calls": False})
        assert r.status_code == 422 and r.json()["error"]["param"] == "parallel_tool_calls"
        named = {"type": "function", "name": "get_time"}  # a grammar-backed call: one at most
        body = {"input": "Time?", "tools": [TIME], "parallel_tool_calls": False, "tool_choice": named}
        assert (
            client.post(PATH, json=body).json()["error"]["param"] == "tools"
        )  # the fake has no grammar masks
    assert engine.requests == []


class FailsMidStream(FakeEngine):
    """Generates `after` tokens of the reply, then fails (an engine error once the stream has begun)."""

    after: int = 4

    def _run(self, rid, prompt, params, fails, cached=0):
        tokens = super()._run(rid, prompt, params, fails, cached)

        async def some_then_fail():
            try:
                for _ in range(self.after):
                    yield await anext(tokens)
                raise EngineError("the engine failed while running this request")
            finally:
                await tokens.aclose()

        return some_then_fail()


def test_a_failure_mid_stream_ends_it_with_response_failed():
    limits = dict(max_input_tokens=400, max_total_tokens=512, max_batch_prefill_tokens=512)
    engine = FailsMidStream(config=EngineConfig(model_id="fake/model", max_batch_total_tokens=2048, **limits))
    with TestClient(create_app(engine)) as client:
        r = client.post(PATH, json={"input": "Hi", "stream": True})
        assert r.status_code == 200 and client.get("/health").status_code == 200
    events = events_of(r.text)  # every event named by its type, numbered without a gap
    assert [e["type"] for e in events[-5:]] == [
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.failed",
    ]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["id"] == events[0]["response"]["id"]
    assert failed["error"] == {
        "code": "server_error",
        "message": "the engine failed while running this request",
    }
    [item] = failed["output"]
    assert item["status"] == "incomplete" and item["content"][0]["text"] == REPLY[:4]
    assert failed["usage"] is None and engine.running == 0
