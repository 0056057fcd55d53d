"""Reading what the Responses routes answer in the unit tests: the prompt the fake engine was given, and the
typed event stream (each event framed `event: <type>` / `data: <json>`, numbered without a gap)."""

from __future__ import annotations

import json


def prompt_of(engine, k: int = -1) -> str:
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
