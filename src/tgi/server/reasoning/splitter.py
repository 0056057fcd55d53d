"""A streaming splitter of a reasoning model's output: text pieces in, reasoning and answer pieces out.

API-agnostic: chat completions send the reasoning as `reasoning_content`, other APIs as their own items or
blocks. The model thinks between a start tag and an end tag (`<think>` ... `</think>`): before the end tag
is reasoning, after it the answer. A tag may arrive split across pieces: the characters that may begin a
tag are held back until the next piece (or the end) says what they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ReasoningDelta:
    """What one piece of output adds to the reasoning and to the answer (either may be empty)."""

    reasoning: str = ""
    answer: str = ""


def _held_back(text: str, tag: str) -> int:
    """How many characters at the end of `text` may be the start of `tag` (0 when none)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


class ReasoningSplitter:
    """Splits one output, piece by piece (`feed`, then `finish` once at its end).

    Contract:
    * `starts_inside`: the prompt already opened the reasoning (a template whose generation prompt ends
      with the start tag, as DeepSeek-R1's): the output is reasoning until the end tag. Otherwise the output
      is reasoning only when it opens with the start tag (leading whitespace allowed), else all answer.
    * The tags themselves are in neither part; a start tag at the very beginning of the reasoning is
      dropped too (a model that writes it although the prompt opened it).
    * An output that ends before the end tag is reasoning to its end (the answer is empty).
    * The answer's leading whitespace (the newlines after `</think>`) is dropped.
    * Feeding the whole output at once gives the same parts as feeding it in any pieces.
    """

    def __init__(self, start_tag: str = "<think>", end_tag: str = "</think>", starts_inside: bool = False):
        self.start_tag = start_tag
        self.end_tag = end_tag
        self.state: Literal["before", "inside", "after"] = "inside" if starts_inside else "before"
        self._buffer = ""  # text received and not yet given out (a possible tag, leading whitespace)
        self._reasoning_began = False  # some reasoning text was given out
        self._answer_began = False  # some answer text was given out
        self.reasoned = starts_inside  # the output has a reasoning part (possibly empty)

    def feed(self, piece: str) -> ReasoningDelta:
        """The reasoning and answer that `piece` completes."""
        self._buffer += piece
        return self._drain(last=False)

    def finish(self) -> ReasoningDelta:
        """What was held back, at the end of the output."""
        return self._drain(last=True)

    def split(self, text: str) -> ReasoningDelta:
        """A whole output at once (`feed` then `finish`)."""
        first, rest = self.feed(text), self.finish()
        return ReasoningDelta(first.reasoning + rest.reasoning, first.answer + rest.answer)

    def _drain(self, last: bool) -> ReasoningDelta:
        reasoning, answer = [], []
        while True:
            before = (self.state, len(self._buffer))
            if self.state == "before":
                self._before(last)
            if self.state == "inside":
                reasoning.append(self._inside(last))
            if self.state == "after":
                answer.append(self._after(last))
            if (self.state, len(self._buffer)) == before:
                return ReasoningDelta("".join(reasoning), "".join(answer))

    def _before(self, last: bool) -> None:
        text = self._buffer.lstrip()
        if text.startswith(self.start_tag):
            self.state, self.reasoned = "inside", True
            self._buffer = text[len(self.start_tag) :]
        elif last or (text and not self.start_tag.startswith(text)):
            self.state = "after"

    def _inside(self, last: bool) -> str:
        if not self._reasoning_began:  # a start tag the prompt already wrote, written again
            text = self._buffer.lstrip()
            if text.startswith(self.start_tag):
                self._buffer = text[len(self.start_tag) :]
            elif not last and self.start_tag.startswith(text):
                return ""  # it may still be that tag: wait
        end = self._buffer.find(self.end_tag)
        if end >= 0:
            out, self._buffer = self._buffer[:end], self._buffer[end + len(self.end_tag) :]
            self.state = "after"
        else:
            keep = 0 if last else _held_back(self._buffer, self.end_tag)
            cut = len(self._buffer) - keep
            out, self._buffer = self._buffer[:cut], self._buffer[cut:]
        self._reasoning_began = self._reasoning_began or bool(out)
        return out

    def _after(self, last: bool) -> str:
        out, self._buffer = self._buffer if self._answer_began else self._buffer.lstrip(), ""
        self._answer_began = self._answer_began or bool(out)
        return out
