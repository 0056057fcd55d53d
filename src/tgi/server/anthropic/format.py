"""Anthropic Messages API response bodies and stream events from engine events.

A reply is a `thinking` block when the model reasoned (with `--reasoning-parser`; its `signature` is empty:
nothing here signs it), then a `text` block, then a `tool_use` block per call (the grammar-backed call of
`tgi.server.chat.tools`, or the model's own calls with `--tool-call-parser`, read by `tgi.server.chat.output`; a
call cut short by `max_tokens`, whose input is no complete JSON, is returned as the text it is). `stop_reason`: `end_turn` (the model's end of turn), `stop_sequence` (with `stop_sequence` set),
`max_tokens`, `model_context_window_exceeded` (the context ended it before `max_tokens`), `tool_use`.
`usage.input_tokens` counts the prompt tokens not read from the prefix cache, `cache_read_input_tokens` those
read from it (Anthropic's split); `output_tokens` every generated token.

A stream is Anthropic's event sequence: `message_start`, `ping`, then per block `content_block_start`,
`content_block_delta` (`thinking_delta`, `text_delta`, or `input_json_delta` pieces of a call's input) and
`content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`.
"""

from __future__ import annotations

import json
import uuid

from tgi.core.request import FinishReason, TokenEvent
from tgi.server.chat.output import ChatOutputStream, chat_message, output_text, piece_of
from tgi.server.chat.parsers import OutputParsers
from tgi.server.chat.tools import CallStream, ToolPlan, message_for
from tgi.server.http.sse import named_event
from tgi.server.service.generation import visible_text


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


def tool_use_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:24]}"


def stop_reason(final: TokenEvent, max_tokens: int, called: bool) -> tuple[str, str | None]:
    """(`stop_reason`, `stop_sequence`) of a reply whose last event is `final`."""
    if final.finish_reason is FinishReason.LENGTH:
        return ("max_tokens" if final.index + 1 >= max_tokens else "model_context_window_exceeded"), None
    if called:
        return "tool_use", None
    if final.finish_reason is FinishReason.STOP:
        return "stop_sequence", final.stop_sequence
    return "end_turn", None


def usage(prompt_tokens: int, output_tokens: int, cached: int) -> dict:
    return {
        "input_tokens": prompt_tokens - cached,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": cached,
    }


def content(
    events: list[TokenEvent], plan: ToolPlan | None, parsers: OutputParsers = OutputParsers()
) -> tuple[list[dict], bool]:
    """The content blocks of a finished reply, and whether it calls a tool."""
    if parsers.active:
        text = output_text(events, parsers, plan)
        message, called = chat_message(text, parsers, plan)
    else:
        text = events[-1].generated_text or ""
        message, called = message_for(text, plan)
    blocks = []
    if message.get("reasoning_content"):
        blocks.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls", ()) if called else ():
        function = call["function"]
        try:
            arguments = json.loads(function["arguments"])
        except json.JSONDecodeError:  # cut short: the answer is the text it is
            thinking = [b for b in blocks if b["type"] == "thinking"]
            return [*thinking, {"type": "text", "text": _answer(text, parsers)}], False
        blocks.append({"type": "tool_use", "id": tool_use_id(), "name": function["name"], "input": arguments})
    return blocks, called


def _answer(text: str, parsers: OutputParsers) -> str:
    """The output after its reasoning (all of it without a reasoning parser)."""
    splitter = parsers.splitter()
    return text if splitter is None else splitter.split(text).answer


def message(model: str, blocks: list[dict], reason: tuple[str | None, str | None], usage_: dict) -> dict:
    return {
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": reason[0],
        "stop_sequence": reason[1],
        "usage": usage_,
    }


class EventWriter:
    """The events of one streamed reply: `start()` once, `feed()` every engine event (the last one
    closes the open block and ends the message)."""

    def __init__(
        self,
        model: str,
        prompt_tokens: int,
        plan: ToolPlan | None,
        max_tokens: int,
        parsers: OutputParsers = OutputParsers(),
    ) -> None:
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.plan, self.parsers = plan, parsers
        self.calls: CallStream | ChatOutputStream | None = None
        if parsers.active:
            self.calls = ChatOutputStream(parsers, plan)
        elif plan is not None and plan.may_call:
            self.calls = CallStream(plan)
        self.index = -1  # the open block's index (-1: none yet)
        self.open: str | None = None  # the open block's type

    def start(self) -> list[bytes]:
        body = message(self.model, [], (None, None), usage(self.prompt_tokens, 0, 0))
        return [
            named_event("message_start", {"type": "message_start", "message": body}),
            named_event("ping", {"type": "ping"}),
        ]

    def feed(self, event: TokenEvent) -> list[bytes]:
        last = event.finish_reason is not None
        piece = piece_of(event, self.parsers, self.plan) if self.parsers.active else visible_text(event)
        if self.calls is not None:
            deltas = self.calls.feed(piece, last)
        else:
            deltas = [{"content": piece}] if piece else []
        out = [frame for delta in deltas for frame in self._delta(delta)]
        if last:
            out += self._end(event)
        return out

    def _delta(self, delta: dict) -> list[bytes]:
        if "reasoning_content" in delta:
            out = (
                []
                if self.open == "thinking"
                else self._open({"type": "thinking", "thinking": "", "signature": ""})
            )
            thinking = {"type": "thinking_delta", "thinking": delta["reasoning_content"]}
            return [*out, self._event("content_block_delta", index=self.index, delta=thinking)]
        if "content" in delta:
            out = [] if self.open == "text" else self._open({"type": "text", "text": ""})
            text = {"type": "text_delta", "text": delta["content"]}
            return [*out, self._event("content_block_delta", index=self.index, delta=text)]
        call = delta["tool_calls"][0]
        out = []
        if "id" in call:
            block = {"type": "tool_use", "id": tool_use_id(), "name": call["function"]["name"], "input": {}}
            out = self._open(block)
        piece = call["function"].get("arguments")
        if piece:
            partial = {"type": "input_json_delta", "partial_json": piece}
            out.append(self._event("content_block_delta", index=self.index, delta=partial))
        return out

    def _open(self, block: dict) -> list[bytes]:
        out = self._close()
        self.index += 1
        self.open = block["type"]
        return [*out, self._event("content_block_start", index=self.index, content_block=block)]

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [self._event("content_block_stop", index=self.index)]

    def _end(self, final: TokenEvent) -> list[bytes]:
        called = self.calls is not None and self.calls.is_call
        reason, sequence = stop_reason(final, self.max_tokens, called)
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        counts = usage(self.prompt_tokens, final.index + 1, final.num_cached_tokens)
        return [
            *self._close(),
            self._event("message_delta", delta=delta, usage=counts),
            self._event("message_stop"),
        ]

    @staticmethod
    def _event(kind: str, **fields) -> bytes:
        return named_event(kind, {"type": kind, **fields})
