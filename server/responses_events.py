"""OpenAI Responses' stream: the typed events of one response, each numbered (`sequence_number`).

`response.created` and `response.in_progress` first; then the output item as it is generated: a message
(`response.output_item.added`, `response.content_part.added`, `response.output_text.delta`...,
`response.output_text.done`, `response.content_part.done`, `response.output_item.done`) or a function
call (`response.output_item.added`, `response.function_call_arguments.delta`...,
`response.function_call_arguments.done`, `response.output_item.done`); last `response.completed`, or
`response.incomplete` when `max_output_tokens` cut it short (as OpenAI's stream ends). Each event is sent
as `event: <type>` and `data: <json>`.
"""

from __future__ import annotations

import json

from tgi.server import responses_format as fmt
from tgi.server.responses_format import IN_PROGRESS, ResponseContext
from tgi.server.tools import CallStream, ToolPlan


def frame(payload: dict) -> bytes:
    """One server-sent event: its `event:` line names the payload's type."""
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {payload['type']}\ndata: {data}\n\n".encode()


class ResponseEvents:
    """Turns the streamed text of one response into its events. The text goes to `CallStream` when the
    request has tools (a call or a text answer, decided by the output's first characters)."""

    def __init__(self, context: ResponseContext, plan: ToolPlan | None) -> None:
        self.context = context
        self.calls = CallStream(plan) if plan is not None and plan.may_call else None
        self.sequence = 0
        self.item: dict | None = None  # the output item being generated
        self.text = ""  # the message's text, or the call's arguments, so far

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
        if self.calls is None:
            return self._text(piece) if piece else []
        out = []
        for delta in self.calls.feed(piece, last):
            if "content" in delta:
                out += self._text(delta["content"])
            else:
                out += self._call(delta["tool_calls"][0])
        return out

    def _where(self) -> dict:
        return {"item_id": self.item["id"], "output_index": 0}

    def _text(self, piece: str) -> list[dict]:
        out = []
        if self.item is None:
            self.item = fmt.message_item(fmt.new_id("msg"), None, IN_PROGRESS)
            out.append(self._event("response.output_item.added", output_index=0, item=self.item))
            part = fmt.text_part("")
            out.append(
                self._event("response.content_part.added", content_index=0, part=part, **self._where())
            )
        if piece:
            self.text += piece
            delta = self._event(
                "response.output_text.delta", content_index=0, delta=piece, logprobs=[], **self._where()
            )
            out.append(delta)
        return out

    def _call(self, delta: dict) -> list[dict]:
        fn = delta["function"]
        if "id" in delta:  # the call's header: its id and name
            self.item = fmt.call_item(fmt.new_id("fc"), delta["id"], fn["name"], "", IN_PROGRESS)
            out = [self._event("response.output_item.added", output_index=0, item=self.item)]
            return out + ([self._arguments(fn["arguments"])] if fn["arguments"] else [])
        return [self._arguments(fn["arguments"])]

    def _arguments(self, piece: str) -> dict:
        self.text += piece
        return self._event("response.function_call_arguments.delta", delta=piece, **self._where())

    def finish(self, status: str, usage: dict) -> tuple[list[dict], dict]:
        """The closing events, and the finished response object (the last event's `response`)."""
        out = [] if self.item is not None else self._text("")  # an empty answer is an empty message
        where = self._where()
        if self.item["type"] == "message":
            part = fmt.text_part(self.text)
            out.append(
                self._event(
                    "response.output_text.done", content_index=0, text=self.text, logprobs=[], **where
                )
            )
            out.append(self._event("response.content_part.done", content_index=0, part=part, **where))
            item = fmt.message_item(self.item["id"], self.text, status)
        else:
            out.append(self._event("response.function_call_arguments.done", arguments=self.text, **where))
            item = fmt.call_item(self.item["id"], self.item["call_id"], self.item["name"], self.text, status)
        out.append(self._event("response.output_item.done", output_index=0, item=item))
        body = self.context.body(status, [item], usage)
        kind = "response.completed" if status == fmt.COMPLETED else "response.incomplete"
        out.append(self._event(kind, response=body))
        return out, body
