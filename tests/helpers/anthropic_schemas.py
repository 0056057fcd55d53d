"""JSON schemas of Anthropic Messages API bodies (a message, the stream's events, an error) and a check of a
stream's event order, shared by the unit and e2e tests of `/v1/messages`."""

from __future__ import annotations

import json
import re

import jsonschema

_USAGE = {
    "type": "object",
    "properties": {
        "input_tokens": {"type": "integer", "minimum": 0},
        "output_tokens": {"type": "integer", "minimum": 0},
        "cache_read_input_tokens": {"type": ["integer", "null"], "minimum": 0},
    },
    "required": ["input_tokens", "output_tokens"],
}
_TEXT = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    "required": ["type", "text"],
}
_TOOL_USE = {
    "type": "object",
    "properties": {
        "type": {"const": "tool_use"},
        "id": {"type": "string", "pattern": "^toolu_"},
        "name": {"type": "string"},
        "input": {"type": "object"},
    },
    "required": ["type", "id", "name", "input"],
}
_THINKING = {
    "type": "object",
    "properties": {
        "type": {"const": "thinking"},
        "thinking": {"type": "string"},
        "signature": {"type": "string"},
    },
    "required": ["type", "thinking", "signature"],
}
_STOP_REASONS = ["end_turn", "max_tokens", "stop_sequence", "tool_use", "model_context_window_exceeded"]
MESSAGE = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": "^msg_"},
        "type": {"const": "message"},
        "role": {"const": "assistant"},
        "model": {"type": "string"},
        "content": {"type": "array", "items": {"oneOf": [_THINKING, _TEXT, _TOOL_USE]}},
        "stop_reason": {"enum": [*_STOP_REASONS, None]},
        "stop_sequence": {"type": ["string", "null"]},
        "usage": _USAGE,
    },
    "required": ["id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"],
    "additionalProperties": False,
}
ERROR = {
    "type": "object",
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            "required": ["type", "message"],
            "additionalProperties": False,
        },
        "request_id": {"type": "string"},
    },
    "required": ["type", "error"],
    "additionalProperties": False,
}


def _event(kind: str, properties: dict) -> dict:
    return {
        "type": "object",
        "properties": {"type": {"const": kind}, **properties},
        "required": ["type", *properties],
        "additionalProperties": False,
    }


_INDEX = {"type": "integer", "minimum": 0}
EVENTS = {
    "message_start": _event("message_start", {"message": MESSAGE}),
    "ping": _event("ping", {}),
    "content_block_start": _event(
        "content_block_start", {"index": _INDEX, "content_block": {"oneOf": [_THINKING, _TEXT, _TOOL_USE]}}
    ),
    "content_block_delta": _event(
        "content_block_delta",
        {
            "index": _INDEX,
            "delta": {
                "oneOf": [
                    _event("thinking_delta", {"thinking": {"type": "string"}}),
                    _event("text_delta", {"text": {"type": "string"}}),
                    _event("input_json_delta", {"partial_json": {"type": "string"}}),
                ]
            },
        },
    ),
    "content_block_stop": _event("content_block_stop", {"index": _INDEX}),
    "message_delta": _event(
        "message_delta",
        {
            "delta": {
                "type": "object",
                "properties": {"stop_reason": {"enum": _STOP_REASONS}, "stop_sequence": {}},
                "required": ["stop_reason", "stop_sequence"],
                "additionalProperties": False,
            },
            "usage": _USAGE,
        },
    ),
    "message_stop": _event("message_stop", {}),
    "error": ERROR,
}
# message_start, ping, then blocks (start, deltas, stop), then message_delta and message_stop
_ORDER = re.compile(
    r"message_start (ping )?(content_block_start (content_block_delta )*content_block_stop )*"
    r"message_delta message_stop "
)


def parse_stream(text: str) -> list[tuple[str, dict]]:
    """The (name, data) of each event of an SSE body whose events all have a name."""
    out = []
    for frame in text.split("\n\n"):
        if not frame:
            continue
        name, data = frame.split("\n", 1)
        assert name.startswith("event: ") and data.startswith("data: "), frame
        out.append((name[len("event: ") :], json.loads(data[len("data: ") :])))
    return out


def check_stream(events: list[tuple[str, dict]]) -> None:
    """Each event valid against its schema, its name its `type`, in Anthropic's order, and each block's
    deltas and stop carrying its index (blocks numbered from 0)."""
    for name, data in events:
        jsonschema.validate(data, EVENTS[name])
        assert data["type"] == name
    names = " ".join(name for name, _ in events) + " "
    assert _ORDER.fullmatch(names), names
    block = -1
    for name, data in events:
        if name == "content_block_start":
            block += 1
            assert data["index"] == block
        elif name in ("content_block_delta", "content_block_stop"):
            assert data["index"] == block
