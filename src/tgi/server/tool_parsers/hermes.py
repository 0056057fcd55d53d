"""Hermes' and Qwen's tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, anywhere in
the output, text around them."""

from __future__ import annotations

import json

from tgi.server.tool_parsers.base import Context, Segment, ToolCallFormat, call_from, held_back

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class HermesFormat(ToolCallFormat):
    name = "hermes"
    markers = (OPEN, CLOSE)

    def fits(self, chat_template: str) -> bool:
        return OPEN in chat_template

    def scan(self, text: str, final: bool, context: Context) -> tuple[list[Segment], int]:
        segments: list[Segment] = []
        i = 0
        while True:
            start = text.find(OPEN, i)
            if start < 0:
                end = len(text) - (0 if final else held_back(text[i:], OPEN))
                if end > i:
                    segments.append(text[i:end])
                return segments, max(end, i)
            if start > i:
                segments.append(text[i:start])
            close = text.find(CLOSE, start)
            if close < 0 and not final:
                return segments, start  # the call is not closed yet
            after = len(text) if close < 0 else close + len(CLOSE)  # an output that ends unclosed
            body = text[start + len(OPEN) : close if close >= 0 else len(text)]
            try:
                call = call_from(json.loads(body))
            except json.JSONDecodeError:
                call = None
            segments.append(call or text[start:after])
            i = after
