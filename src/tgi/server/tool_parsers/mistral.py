"""Mistral's tool calls after `[TOOL_CALLS]` (a special token): a JSON list of `{"name", "arguments"}`
(v3 tokenizers), or `name[ARGS]{...}` / `name{...}` per call (v11 and later); text before them."""

from __future__ import annotations

import re

from tgi.server.tool_parsers.base import (
    Context,
    Segment,
    ToolCall,
    ToolCallFormat,
    call_from,
    decode_at,
    held_back,
)

TOOL_CALLS, ARGS = "[TOOL_CALLS]", "[ARGS]"
_NAMED = re.compile(r"\s*([A-Za-z0-9_.-]{1,64})\s*(?:\[CALL_ID\][A-Za-z0-9]*)?(?:\[ARGS\])?\s*")


class MistralFormat(ToolCallFormat):
    name = "mistral"
    markers = (TOOL_CALLS, ARGS, "[CALL_ID]")

    def fits(self, chat_template: str) -> bool:
        return TOOL_CALLS in chat_template

    def scan(self, text: str, final: bool, context: Context) -> tuple[list[Segment], int]:
        segments: list[Segment] = []
        i = 0
        while True:
            start = text.find(TOOL_CALLS, i)
            if start < 0:
                end = len(text) - (0 if final else held_back(text[i:], TOOL_CALLS))
                if end > i:
                    segments.append(text[i:end])
                return segments, max(end, i)
            if start > i:
                segments.append(text[i:start])
            read = self._calls(text, start + len(TOOL_CALLS))
            if read is None and not final:
                return segments, start  # not complete yet
            if read is None or not read[0]:  # unparseable: given back as text
                segments.append(text[start:])
                return segments, len(text)
            calls, i = read
            segments.extend(calls)

    @staticmethod
    def _calls(text: str, i: int) -> tuple[list[ToolCall], int] | None:
        """The calls after one `[TOOL_CALLS]` and where they end; None when not complete; ([], _) when they
        cannot be read."""
        body = text[i:].lstrip()
        i = len(text) - len(body)
        if body.startswith("["):
            decoded = decode_at(text, i)
            if decoded is None:
                return None
            value = decoded[0] if isinstance(decoded[0], list) else [decoded[0]]
            calls = [call_from(v) for v in value]
            return ([] if None in calls or not calls else calls), decoded[1]
        named = _NAMED.match(text, i)
        if named is None or named.end() >= len(text):
            return None if (named is not None or not body) else ([], i)
        if text[named.end()] != "{":
            rest = text[named.end() :]
            return None if any(m.startswith(rest) for m in (ARGS, "[CALL_ID]")) else ([], i)
        decoded = decode_at(text, named.end())
        if decoded is None:
            return None
        call = call_from({"name": named.group(1), "arguments": decoded[0]})
        return ([call] if call else []), decoded[1]
