"""The Responses stream of a function call, of a text answer beside tools, and of an empty answer: the
typed events in order, numbered, and the finished response they end with."""

from __future__ import annotations

import json

from tgi.server.chat.tools import CallStream, plan_tools
from tgi.server.responses.events import ResponseEvents, frame
from tgi.server.responses.format import (
    COMPLETED,
    INCOMPLETE,
    ResponseContext,
    conversation_message,
    output_items,
    usage,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def run(plan, pieces: list[str], status: str = COMPLETED) -> tuple[list[dict], dict]:
    events = ResponseEvents(ResponseContext(model="m"), CallStream(plan) if plan is not None else None)
    out = events.start()
    for i, piece in enumerate(pieces):
        out += events.feed(piece, i == len(pieces) - 1)
    closing, body = events.finish(status, usage(3, len(pieces)))
    out += closing
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out, body


def test_a_call_streams_its_arguments():
    out, body = run(plan_tools([WEATHER], "required"), [CALL[i : i + 7] for i in range(0, len(CALL), 7)])
    kinds = [e["type"] for e in out]
    deltas = kinds.count("response.function_call_arguments.delta")
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * deltas,
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = out[2]["item"]
    assert added["type"] == "function_call" and added["name"] == "get_weather" and added["arguments"] == ""
    arguments = "".join(e["delta"] for e in out if e["type"].endswith("arguments.delta"))
    assert json.loads(arguments) == {"city": "Paris"} and out[-3]["arguments"] == arguments
    [item] = body["output"]
    assert item == {**added, "status": "completed", "arguments": arguments} and out[-1]["response"] == body
    assert item["call_id"].startswith("call_") and item["id"].startswith("fc_")


def test_a_text_answer_beside_tools_is_a_message():
    out, body = run(plan_tools([WEATHER], "auto"), ["It ", "rains."])
    assert [e["type"] for e in out][2:4] == ["response.output_item.added", "response.content_part.added"]
    assert body["output"][0]["content"][0]["text"] == "It rains." and body["output"][0]["type"] == "message"


def test_an_empty_answer_is_an_empty_message():
    out, body = run(None, [""], INCOMPLETE)
    assert "response.output_text.delta" not in [e["type"] for e in out]
    assert out[-1]["type"] == "response.incomplete" and body["incomplete_details"] == {
        "reason": "max_output_tokens"
    }
    assert body["output"][0]["content"][0]["text"] == "" and body["output"][0]["status"] == INCOMPLETE


def test_frame_names_the_event():
    assert frame({"type": "response.created", "sequence_number": 0}) == (
        b'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n'
    )


class Scripted:
    """A reader whose deltas are given (as the output parsers' stream gives them)."""

    def __init__(self, deltas: list[list[dict]]) -> None:
        self.deltas = iter(deltas)

    def feed(self, piece: str, last: bool) -> list[dict]:
        return next(self.deltas)


def own_call(index: int, name: str, arguments: str) -> dict:
    call = {"index": index, "id": f"call_{index}", "type": "function"}
    return {"tool_calls": [{**call, "function": {"name": name, "arguments": arguments}}]}


def test_reasoning_text_and_calls_are_items_in_order():
    reader = Scripted(
        [
            [{"reasoning_content": "Think"}],
            [{"reasoning_content": "ing."}, {"content": "Calling."}],
            [own_call(0, "a", '{"x": 1}'), own_call(1, "b", "{}")],
        ]
    )
    events = ResponseEvents(ResponseContext(model="m"), reader)
    out = events.start()
    for i in range(3):
        out += events.feed("", i == 2)
    closing, body = events.finish(COMPLETED, usage(1, 3))
    out += closing
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    items = body["output"]
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call", "function_call"]
    assert (
        items[0]["content"] == [{"type": "reasoning_text", "text": "Thinking."}] and items[0]["summary"] == []
    )
    assert items[1]["content"][0]["text"] == "Calling."
    assert [(i["call_id"], i["arguments"]) for i in items[2:]] == [("call_0", '{"x": 1}'), ("call_1", "{}")]
    assert all(i["status"] == COMPLETED for i in items)
    added = [e for e in out if e["type"] == "response.output_item.added"]
    finished = [e for e in out if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in added] == [e["output_index"] for e in finished] == [0, 1, 2, 3]
    assert [e["item"] for e in finished] == items
    reasoning = [e["delta"] for e in out if e["type"] == "response.reasoning_text.delta"]
    assert reasoning == ["Think", "ing."] and all(
        e["item_id"] == items[0]["id"] for e in out[3:8] if "item_id" in e
    )
    # each item's events come between its added and its done
    kinds = [e["type"] for e in out]
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")


def test_output_items_of_a_finished_message():
    message = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "Hmm.",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{"}}],
    }
    items = output_items(message, INCOMPLETE)
    assert [i["type"] for i in items] == ["reasoning", "function_call"]
    assert [i["status"] for i in items] == [COMPLETED, INCOMPLETE] and items[1]["arguments"] == "{"
    assert [i["type"] for i in output_items({"role": "assistant", "content": ""}, COMPLETED)] == ["message"]
    cut_while_thinking = {"role": "assistant", "content": "", "reasoning_content": "Hmm"}
    assert [i["type"] for i in output_items(cut_while_thinking, INCOMPLETE)] == ["reasoning"]


def test_an_output_goes_back_to_the_conversation_whole():
    message = {
        "role": "assistant",
        "content": "Checking.",
        "reasoning_content": "Hmm.",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    assert conversation_message(output_items(message, COMPLETED)) == message
