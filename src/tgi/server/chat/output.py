"""A chat completion's output read back through the output parsers: the assistant message of a finished
output, and the deltas of a streamed one (`reasoning_content`, `content`, `tool_calls`).

The reasoning comes first (`tgi.server.reasoning`), then the answer is read for tool calls: in the model's
own format with `--tool-call-parser` and `tool_choice: auto` (`tgi.server.tool_parsers`), else as the
grammar-backed calls of `tgi.server.chat.tools`.
"""

from __future__ import annotations

from tgi.core.request import TokenEvent
from tgi.server.chat.parsers import OutputParsers
from tgi.server.chat.tools import CallStream, ToolPlan, message_for, new_call_id
from tgi.server.reasoning import ReasoningDelta
from tgi.server.service.generation import visible_text
from tgi.server.tool_parsers import ToolCall, ToolCallStream


def _own_format(parsers: OutputParsers, tools: ToolPlan | None):
    """The model's own tool-call format, when this request reads it (tools offered, `tool_choice: auto`)."""
    if parsers.tool_format is not None and tools is not None and tools.choice == "auto":
        return parsers.tool_format
    return None


def piece_of(event: TokenEvent, parsers: OutputParsers, tools: ToolPlan | None) -> str:
    """The text of one token as the parsers read it: the client's visible text, and the own text of the
    special tokens the tool-call format needs (`[TOOL_CALLS]`, `<|python_tag|>`)."""
    fmt = _own_format(parsers, tools)
    if event.special and fmt is not None and event.token_text in fmt.markers:
        return event.token_text
    return visible_text(event)


def output_text(events: list[TokenEvent], parsers: OutputParsers, tools: ToolPlan | None) -> str:
    """A finished output's text as the parsers read it (`piece_of` each token)."""
    fmt = _own_format(parsers, tools)
    if fmt is None or not any(e.special and e.token_text in fmt.markers for e in events):
        return events[-1].generated_text or ""
    return "".join(piece_of(e, parsers, tools) for e in events)


def reasoning_tokens(pieces: list[str], parsers: OutputParsers) -> int:
    """How many of an output's tokens went to its reasoning (`pieces`: each token's text, as `piece_of`
    reads it, in order): those holding any character of the reasoning or of its tags (a token across the
    end tag counts), and the tokens without text generated inside it. 0 when the output did not reason
    (no reasoning parser, or an output that does not open the reasoning)."""
    splitter = parsers.splitter()
    if splitter is None:
        return 0
    text = "".join(pieces)
    splitter.split(text)
    if not splitter.reasoned:
        return 0
    end = text.find(splitter.end_tag)
    reasoning_end = len(text) if end < 0 else end + len(splitter.end_tag)
    count = offset = 0
    for piece in pieces:
        count += offset < reasoning_end
        offset += len(piece)
    return count


def _openai_call(call: ToolCall, index: int | None = None) -> dict:
    out = {
        "id": new_call_id(),
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    return out if index is None else {"index": index, **out}


def chat_message(text: str, parsers: OutputParsers, tools: ToolPlan | None) -> tuple[dict, bool]:
    """The assistant message of a finished output, and whether it calls tools. `reasoning_content` is
    there whenever a reasoning parser is (None when the output did not reason)."""
    reasoning = None
    splitter = parsers.splitter()
    if splitter is not None:
        parts = splitter.split(text)
        reasoning, text = (parts.reasoning if splitter.reasoned else None), parts.answer
    fmt = _own_format(parsers, tools)
    if fmt is not None:
        parsed = fmt.parse(text)
        message: dict = {"role": "assistant", "content": parsed.content}
        if parsed.calls:
            message["content"] = parsed.content.strip() or None
            message["tool_calls"] = [_openai_call(c) for c in parsed.calls]
        called = bool(parsed.calls)
    else:
        message, called = message_for(text, tools)
    if parsers.reasoning is not None:
        message["reasoning_content"] = reasoning
    return message, called


class ChatOutputStream:
    """One streamed choice read piece by piece into chat deltas: `reasoning_content` pieces as they come,
    then the answer as `content` pieces or `tool_calls` (the model's own calls each once complete, with
    its id, name and arguments; the generic grammar's as `CallStream` streams them)."""

    def __init__(self, parsers: OutputParsers, tools: ToolPlan | None) -> None:
        self.splitter = parsers.splitter()
        fmt = _own_format(parsers, tools)
        self.own = ToolCallStream(fmt) if fmt is not None else None
        self.generic = CallStream(tools) if fmt is None and tools is not None and tools.may_call else None
        self.num_calls = 0

    @property
    def is_call(self) -> bool:
        return self.num_calls > 0 or (self.generic is not None and self.generic.is_call)

    def feed(self, piece: str, last: bool) -> list[dict]:
        """The deltas of the next piece of output (`last`: the output ends here)."""
        parts = ReasoningDelta("", piece)
        if self.splitter is not None:
            parts = self.splitter.feed(piece)
            if last:
                rest = self.splitter.finish()
                parts = ReasoningDelta(parts.reasoning + rest.reasoning, parts.answer + rest.answer)
        deltas = [{"reasoning_content": parts.reasoning}] if parts.reasoning else []
        return deltas + self._answer(parts.answer, last)

    def _answer(self, text: str, last: bool) -> list[dict]:
        if self.generic is not None:
            return self.generic.feed(text, last)
        if self.own is None:
            return [{"content": text}] if text else []
        deltas = []
        for segment in self.own.feed(text, last):
            if isinstance(segment, ToolCall):
                deltas.append({"tool_calls": [_openai_call(segment, self.num_calls)]})
                self.num_calls += 1
            elif segment and not (self.num_calls and segment.isspace()):  # no blank lines between calls
                deltas.append({"content": segment})
        return deltas
