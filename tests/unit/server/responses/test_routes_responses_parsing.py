"""OpenAI Responses routes with a reasoning parser and a tool-call parser on the fake engine: the reasoning
and the model's own calls as output items (whole and streamed), a reasoning input item, `parallel_tool_calls`
refused where the model writes its own calls, and a failure mid-stream ending it with `response.failed`."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from responses_events import events_of, prompt_of

from fake_engine import REPLY, CharTokenizer, FakeEngine, conversation_engine
from tgi.core.request import EngineError
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

PATH = "/v1/responses"


@pytest.fixture
def engine():
    """Room for conversations of a few turns (a character is a token)."""
    return conversation_engine()


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
    engine = conversation_engine(reply=reply, tokenizer=OpensThinking())
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
    engine = conversation_engine(FailsMidStream)
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
