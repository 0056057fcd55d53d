"""What every tool-call parser shares: the call it reads, the interface of a format, and the streaming
reader built on it. API-agnostic: chat completions, Responses and Messages each write the calls their way.

A format reads a model's text as segments, in order: plain text, or a `ToolCall`. It reads as far as it
can decide (`scan`), so that the same reader serves a whole output and a stream: the stream hands it what
it has not yet decided, and it answers the segments it decided and how much text they covered; the rest
waits for more text (a call not yet closed, a marker cut in two). A call that does not parse (bad JSON,
no name) is given back as the text it was, never an error.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

#: what came before the text a format is asked to read: nothing, a call, or plain text
Context = Literal["start", "call", "text"]
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class ToolCall:
    """One call as the model wrote it: the function's name and its arguments as JSON text (an object)."""

    name: str
    arguments: str


Segment = str | ToolCall


@dataclass(frozen=True)
class ParsedOutput:
    """A whole output read: its text outside the calls (the segments' text joined), and the calls."""

    content: str
    calls: list[ToolCall]


def call_from(value: Any, argument_keys: tuple[str, ...] = ("arguments",)) -> ToolCall | None:
    """The call a decoded JSON value describes (`{"name": ..., "<argument key>": {...}}`), or None. Arguments
    given as the JSON text of an object are read as that object."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    if not _NAME.match(value["name"]):
        return None
    arguments = next((value[k] for k in argument_keys if k in value), {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(value["name"], json.dumps(arguments, ensure_ascii=False))


def held_back(text: str, marker: str) -> int:
    """How many characters at the end of `text` may be the start of `marker`."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


_DECODER = json.JSONDecoder()


def decode_at(text: str, start: int) -> tuple[Any, int] | None:
    """The JSON value at `text[start:]` and where it ends, or None when there is none (yet)."""
    try:
        return _DECODER.raw_decode(text, start)
    except json.JSONDecodeError:
        return None


class ToolCallFormat(ABC):
    """One model family's way of writing tool calls."""

    #: the name `--tool-call-parser` gives it (vLLM's)
    name: str
    #: texts of special tokens the format needs to see (a tokenizer's special tokens are not in the
    #: output's text: the caller passes these tokens' own text through)
    markers: tuple[str, ...] = ()

    @abstractmethod
    def fits(self, chat_template: str) -> bool:
        """Whether the chat template teaches the model this format."""

    @abstractmethod
    def scan(self, text: str, final: bool, context: Context) -> tuple[list[Segment], int]:
        """The segments decided at the start of `text`, and how many characters they cover (the rest waits
        for more text). `final`: no more text comes, everything is decided. `context`: what came before
        `text` in the output."""

    def parse(self, text: str) -> ParsedOutput:
        """A whole output: its text and its calls."""
        segments, _ = self.scan(text, True, "start")
        calls = [s for s in segments if isinstance(s, ToolCall)]
        return ParsedOutput("".join(s for s in segments if isinstance(s, str)), calls)


class ToolCallStream:
    """Reads one output piece by piece: `feed` answers the segments each piece decides. Together they are
    those of `ToolCallFormat.parse` on the whole output."""

    def __init__(self, fmt: ToolCallFormat) -> None:
        self.format = fmt
        self._pending = ""
        self._context: Context = "start"

    def feed(self, piece: str, last: bool = False) -> list[Segment]:
        self._pending += piece
        segments, used = self.format.scan(self._pending, last, self._context)
        self._pending = self._pending[used:]
        if segments:
            self._context = "call" if isinstance(segments[-1], ToolCall) else "text"
        return segments
