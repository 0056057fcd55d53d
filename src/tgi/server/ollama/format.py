"""Ollama API response bodies from engine events: `/api/generate`'s and `/api/chat`'s NDJSON lines (or their
one body), and the served model as `/api/tags`, `/api/show` and `/api/ps` describe it (`tgi.server.ollama.models`).

A stream is one JSON object per line: `done: false` objects, each with the next piece of text (`response` on
`/api/generate`, `message.content` on `/api/chat`; `thinking` / `message.thinking` for the model's reasoning
with `--reasoning-parser`), then one `done: true` object with `done_reason` (`stop`, or `length` when
`num_predict` or the context ended it) and the counts and durations (nanoseconds): `total_duration` (from the
request's arrival), `load_duration` (0: the model was loaded at launch), `prompt_eval_count` (the prompt's
tokens), `prompt_eval_duration` (arrival to the first token: the prompt's tokenizing, queueing and prefill),
`eval_count` (the generated tokens) and `eval_duration` (first token to last). A chat reply's tool calls
come whole, as `message.tool_calls` (`function.name`, `function.arguments` an object) in the line before the
last; a call cut short by `num_predict` (whose arguments are no complete JSON) comes back as the text it is.
Not streamed, the body is those lines merged: the text joined, the calls, the last line's fields.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from tgi.core.request import FinishReason, TokenEvent
from tgi.server.chat.output import ChatOutputStream, piece_of
from tgi.server.chat.parsers import OutputParsers
from tgi.server.chat.tools import CallStream, ToolPlan
from tgi.server.service.generation import visible_text


def created_at() -> str:
    """Now, as Ollama writes `created_at` (RFC 3339, UTC)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def done_reason(final: TokenEvent) -> str:
    return "length" if final.finish_reason is FinishReason.LENGTH else "stop"


def load_response(model: str, chat: bool) -> dict:
    """The answer to a request with nothing to generate from (an empty prompt, no messages): Ollama's
    "the model is loaded" (`done_reason: load`), which it always is here."""
    out: dict = {"model": model, "created_at": created_at()}
    out.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
    return {**out, "done": True, "done_reason": "load"}


class ReplyWriter:
    """The lines of one reply: `feed()` every engine event (the last one ends it); `whole()` the body of a
    reply not streamed, from the lines `feed` gave. `chat`: `/api/chat`'s lines, else `/api/generate`'s."""

    def __init__(
        self,
        model: str,
        prompt_tokens: int,
        started_ns: int,
        chat: bool,
        plan: ToolPlan | None = None,
        parsers: OutputParsers = OutputParsers(),
    ) -> None:
        self.model, self.prompt_tokens, self.started_ns, self.chat = model, prompt_tokens, started_ns, chat
        self.plan, self.parsers = plan, parsers
        self.stream: CallStream | ChatOutputStream | None = None
        if parsers.active:
            self.stream = ChatOutputStream(parsers, plan)
        elif plan is not None and plan.may_call:
            self.stream = CallStream(plan)
        self.calls: list[list[str]] = []  # [name, arguments text] of each call, as its deltas come
        self.sent_text = False
        self.first_ns: int | None = None
        self.lines: list[dict] = []

    def _line(self, text: str = "", thinking: str = "", **extra) -> dict:
        out: dict = {"model": self.model, "created_at": created_at()}
        if self.chat:
            message: dict = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            if "tool_calls" in extra:
                message["tool_calls"] = extra.pop("tool_calls")
            out["message"] = message
        else:
            out["response"] = text
            if thinking:
                out["thinking"] = thinking
        return {**out, "done": False, **extra}

    def feed(self, event: TokenEvent) -> list[dict]:
        now = time.perf_counter_ns()
        if self.first_ns is None:
            self.first_ns = now
        last = event.finish_reason is not None
        active = self.parsers.active
        piece = piece_of(event, self.parsers, self.plan) if active else visible_text(event)
        deltas = (
            self.stream.feed(piece, last)
            if self.stream is not None
            else ([{"content": piece}] if piece else [])
        )
        out = []
        for delta in deltas:
            if "reasoning_content" in delta:
                out.append(self._line(thinking=delta["reasoning_content"]))
            elif "content" in delta:
                self.sent_text = True
                out.append(self._line(delta["content"]))
            else:
                call = delta["tool_calls"][0]
                function = call.get("function", {})
                if "id" in call:
                    self.calls.append([function.get("name", ""), ""])
                self.calls[-1][1] += function.get("arguments") or ""
        if last:
            out += self._end(event, now)
        self.lines += out
        return out

    def _end(self, final: TokenEvent, now: int) -> list[dict]:
        out = []
        calls = []
        for i, (name, arguments) in enumerate(self.calls):
            try:
                parsed = json.loads(arguments)
            except json.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):  # cut short: the reply is the text it is
                calls = []
                if not self.sent_text:
                    out.append(self._line(final.generated_text or ""))
                break
            calls.append({"function": {"index": i, "name": name, "arguments": parsed}})
        if calls:
            out.append(self._line(tool_calls=calls))
        first = self.first_ns if self.first_ns is not None else now
        stats = {
            "done_reason": done_reason(final),
            "total_duration": max(now - self.started_ns, 1),
            "load_duration": 0,
            "prompt_eval_count": self.prompt_tokens,
            "prompt_eval_duration": max(first - self.started_ns, 1),
            "eval_count": final.index + 1,
            "eval_duration": max(now - first, 1),
        }
        return [*out, {**self._line(), "done": True, **stats}]

    def whole(self) -> dict:
        """The lines merged into one body (module docstring)."""
        final = dict(self.lines[-1])
        if self.chat:
            content = "".join(line["message"]["content"] for line in self.lines)
            message: dict = {"role": "assistant", "content": content}
            thinking = "".join(line["message"].get("thinking", "") for line in self.lines)
            if thinking:
                message["thinking"] = thinking
            calls = [c for line in self.lines for c in line["message"].get("tool_calls", ())]
            if calls:
                message["tool_calls"] = calls
            final["message"] = message
        else:
            final["response"] = "".join(line["response"] for line in self.lines)
            thinking = "".join(line.get("thinking", "") for line in self.lines)
            if thinking:
                final["thinking"] = thinking
        return final
