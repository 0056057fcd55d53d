"""OpenAI Responses' stream: the typed events of one response, each numbered (`sequence_number`).

`response.created` and `response.in_progress` first; then each output item as it is generated, in order
(`output_index`): reasoning (`response.output_item.added`, `response.content_part.added`,
`response.reasoning_text.delta`..., `response.reasoning_text.done`, `response.content_part.done`,
`response.output_item.done`), a message (the same with `response.output_text.delta`/`.done`) or a function
call (`response.output_item.added`, `response.function_call_arguments.delta`...,
`response.function_call_arguments.done`, `response.output_item.done`); last `response.completed`, or
`response.incomplete` when `max_output_tokens` cut it short (as OpenAI's stream ends), or `response.failed`
(the response with status `failed` and its `error`) when the generation fails once the stream has begun.
Each event is sent as `event: <type>` and `data: <json>`.

The output is read by a `DeltaReader` (`tgi.server.chat.tools.CallStream`, or the output parsers' stream), whose
chat deltas (`reasoning_content`, `content`, `tool_calls`) say which item each piece belongs to.
"""

from __future__ import annotations

import json
from typing import Protocol

from tgi.server.responses import format as fmt
from tgi.server.responses.format import COMPLETED, FAILED, IN_PROGRESS, INCOMPLETE, ResponseContext

_TEXT_KINDS = {"reasoning": ("reasoning_text", "rs"), "message": ("output_text", "msg")}


class DeltaReader(Protocol):
    """Reads the output piece by piece into chat deltas."""

    def feed(self, piece: str, last: bool) -> list[dict]: ...


def frame(payload: dict) -> bytes:
    """One server-sent event: its `event:` line names the payload's type."""
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {payload['type']}\ndata: {data}\n\n".encode()


class ResponseEvents:
    """Turns the streamed text of one response into its events (`reader`: None reads it all as the
    message's text)."""

    def __init__(self, context: ResponseContext, reader: DeltaReader | None) -> None:
        self.context = context
        self.reader = reader
        self.sequence = 0
        self.done: list[dict] = []  # the finished output items
        self.item: dict | None = None  # the output item being generated
        self.text = ""  # its text (reasoning, message) or arguments (call) so far

    def _event(self, kind: str, **fields) -> dict:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def start(self) -> list[dict]:
        body = self.context.body(IN_PROGRESS, [])
        return [
            self._event("response.created", response=body),
            self._event("response.in_progress", response=body),
        ]

    def feed(self, piece: str, last: bool) -> list[dict]:
        """The events of the next piece of text (`last`: the output ends with it)."""
        if self.reader is None:
            return self._text("message", piece)
        out = []
        for delta in self.reader.feed(piece, last):
            if delta.get("reasoning_content"):
                out += self._text("reasoning", delta["reasoning_content"])
            if delta.get("content"):
                out += self._text("message", delta["content"])
            for call in delta.get("tool_calls") or ():
                out += self._call(call)
        return out

    def _where(self) -> dict:
        return {"item_id": self.item["id"], "output_index": len(self.done)}

    def _open(self, item: dict) -> list[dict]:
        """Close the item being generated (completed: another follows it) and start `item`."""
        out = self._close(COMPLETED) if self.item is not None else []
        self.item, self.text = item, ""
        return [*out, self._event("response.output_item.added", output_index=len(self.done), item=item)]

    def _text(self, kind: str, piece: str) -> list[dict]:
        out = []
        if self.item is None or self.item["type"] != kind:
            part, prefix = _TEXT_KINDS[kind]
            item_id = fmt.new_id(prefix)
            item = fmt.reasoning_item(item_id, None, IN_PROGRESS) if kind == "reasoning" else None
            out += self._open(item or fmt.message_item(item_id, None, IN_PROGRESS))
            empty = {"type": part, "text": ""} if kind == "reasoning" else fmt.text_part("")
            out.append(
                self._event("response.content_part.added", content_index=0, part=empty, **self._where())
            )
        if piece:
            self.text += piece
            kind_event = (
                "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
            )
            extra = {} if kind == "reasoning" else {"logprobs": []}
            out.append(self._event(kind_event, content_index=0, delta=piece, **extra, **self._where()))
        return out

    def _call(self, delta: dict) -> list[dict]:
        fn = delta["function"]
        out = []
        if "id" in delta:  # a new call: its id and name (and, in a model's own format, all its arguments)
            out += self._open(fmt.call_item(fmt.new_id("fc"), delta["id"], fn["name"], "", IN_PROGRESS))
        if fn.get("arguments"):
            self.text += fn["arguments"]
            out.append(
                self._event("response.function_call_arguments.delta", delta=fn["arguments"], **self._where())
            )
        return out

    def _close(self, status: str) -> list[dict]:
        """The events that finish the item being generated, with `status`."""
        item, where, text, out = self.item, self._where(), self.text, []
        if item["type"] == "function_call":
            out.append(self._event("response.function_call_arguments.done", arguments=text, **where))
            done = fmt.call_item(item["id"], item["call_id"], item["name"], text, status)
        else:
            reasoning = item["type"] == "reasoning"
            if reasoning:
                out.append(self._event("response.reasoning_text.done", content_index=0, text=text, **where))
                part = {"type": "reasoning_text", "text": text}
                done = fmt.reasoning_item(item["id"], text, status)
            else:
                out.append(
                    self._event("response.output_text.done", content_index=0, text=text, logprobs=[], **where)
                )
                part = fmt.text_part(text)
                done = fmt.message_item(item["id"], text, status)
            out.append(self._event("response.content_part.done", content_index=0, part=part, **where))
        out.append(self._event("response.output_item.done", output_index=len(self.done), item=done))
        self.done.append(done)
        self.item = None
        return out

    def finish(self, status: str, usage: dict) -> tuple[list[dict], dict]:
        """The closing events, and the finished response object (the last event's `response`)."""
        out = []
        if self.item is None and not self.done:
            out += self._text("message", "")  # an empty answer is an empty message
        if self.item is not None:
            out += self._close(status)
        body = self.context.body(status, list(self.done), usage)
        kind = "response.completed" if status == COMPLETED else "response.incomplete"
        out.append(self._event(kind, response=body))
        return out, body

    def fail(self, code: str, message: str) -> list[dict]:
        """The last events of a stream whose generation failed: the item being generated closed as
        `incomplete`, then `response.failed`, its response holding the items so far, its `error` and no
        usage."""
        out = self._close(INCOMPLETE) if self.item is not None else []
        body = self.context.body(FAILED, list(self.done), None, {"code": code, "message": message})
        out.append(self._event("response.failed", response=body))
        return out
