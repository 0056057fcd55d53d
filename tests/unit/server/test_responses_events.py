"""The Responses stream of a function call, of a text answer beside tools, and of an empty answer: the
typed events in order, numbered, and the finished response they end with."""

from __future__ import annotations

import json

from tgi.server.responses_events import ResponseEvents, frame
from tgi.server.responses_format import COMPLETED, INCOMPLETE, ResponseContext, usage
from tgi.server.tools import plan_tools

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def run(plan, pieces: list[str], status: str = COMPLETED) -> tuple[list[dict], dict]:
    events = ResponseEvents(ResponseContext(model="m"), plan)
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
