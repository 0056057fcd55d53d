"""Llama 3.x's JSON tool calls: the output is the calls, `{"name": ..., "parameters": {...}}` (or
`"arguments"`), optionally after `<|python_tag|>`, several separated by `;`. An output that does not start
with a call is text."""

from __future__ import annotations

from tgi.server.tool_parsers.base import Context, Segment, ToolCallFormat, call_from, decode_at

PYTHON_TAG = "<|python_tag|>"


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


class Llama3JsonFormat(ToolCallFormat):
    name = "llama3_json"
    markers = (PYTHON_TAG,)

    def fits(self, chat_template: str) -> bool:
        llama3 = "<|start_header_id|>" in chat_template and '"parameters"' in chat_template
        return PYTHON_TAG in chat_template or llama3

    def scan(self, text: str, final: bool, context: Context) -> tuple[list[Segment], int]:
        if context == "text":
            return ([text], len(text)) if text else ([], 0)
        i = _skip_space(text, 0)
        if context == "start":
            if text.startswith(PYTHON_TAG, i):
                i = _skip_space(text, i + len(PYTHON_TAG))
            elif not final and PYTHON_TAG.startswith(text[i:]):
                return [], 0  # (nothing yet, or the tag cut short)
        segments: list[Segment] = []
        used = 0
        while True:
            if context == "call" or segments:  # between calls: `;` and space
                i = _skip_space(text, i)
                if text.startswith(";", i):
                    i = _skip_space(text, i + 1)
            if i >= len(text):
                return segments, (len(text) if final else used)
            decoded = decode_at(text, i) if text[i] == "{" else None
            call = call_from(decoded[0], ("parameters", "arguments")) if decoded else None
            if call is None:
                if decoded is None and text[i] == "{" and not final:
                    return segments, used  # a call, or JSON, not yet complete
                # not a call: the rest is text (the whole output, when no call came before it)
                start = used if (segments or context == "call") else 0
                return [*segments, text[start:]], len(text)
            segments.append(call)
            i = used = decoded[1]
