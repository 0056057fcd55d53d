"""OpenAI response and chunk bodies (ChatCompletion, ChatCompletionChunk, Completion) from engine events."""

from __future__ import annotations

import time
import uuid

from tgi.core.request import FinishReason, TokenEvent
from tgi.server.service.generation import visible_text

SYSTEM_FINGERPRINT = "tgi-0.1.0"


def finish_reason(reason: FinishReason | None, tool_call: bool = False) -> str | None:
    """OpenAI's name for why a choice ended; a tool call that was not cut short ends with `tool_calls`."""
    if reason is None:
        return None
    if reason is FinishReason.LENGTH:
        return "length"
    return "tool_calls" if tool_call else "stop"


class Envelope:
    """The fields every body of one response shares."""

    def __init__(self, prefix: str, obj: str, model: str) -> None:
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.object = obj
        self.created = int(time.time())
        self.model = model

    def body(self, choices: list[dict], usage: dict | None = None) -> dict:
        return {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": choices,
            "usage": usage,
        }


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    """OpenAI's usage; `cached_tokens`: prompt tokens whose keys/values came from the prefix cache."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def token_label(token_id: int, text: str, as_ids: bool) -> str:
    """How a token is named in `logprobs`: its text, or `token_id:<id>` with vLLM's
    `return_tokens_as_token_ids` (a token whose bytes are no whole character stays identifiable)."""
    return f"token_id:{token_id}" if as_ids else text


def _token_logprob(text: str, logprob: float | None) -> dict:
    return {"token": text, "logprob": logprob if logprob is not None else 0.0, "bytes": list(text.encode())}


def chat_logprob(event: TokenEvent, as_ids: bool = False) -> dict:
    """One entry of `choices[].logprobs.content` (`as_ids`: `token_label`'s)."""
    entry = _token_logprob(token_label(event.token_id, event.token_text, as_ids), event.logprob)
    tops = event.top_tokens
    entry["top_logprobs"] = [_token_logprob(token_label(t.id, t.text, as_ids), t.logprob) for t in tops]
    return entry


def completion_logprobs(events: list[TokenEvent], start_offset: int = 0, as_ids: bool = False) -> dict:
    """Legacy completions' `logprobs` object (tokens, token_logprobs, top_logprobs, text_offset)."""
    offsets, pos = [], start_offset
    for e in events:
        offsets.append(pos)
        pos += len(visible_text(e))
    return {
        "tokens": [token_label(e.token_id, e.token_text, as_ids) for e in events],
        "token_logprobs": [e.logprob for e in events],
        "top_logprobs": [
            {token_label(t.id, t.text, as_ids): t.logprob for t in e.top_tokens} for e in events
        ],
        "text_offset": offsets,
    }


def with_prompt_logprobs(prompt: tuple, generated: dict, as_ids: bool = False) -> dict:
    """`echo` with `logprobs`: the prompt tokens (`PromptToken`s; the first has no logprob) before the
    generated ones in a legacy `logprobs` object; a prompt position's `top_logprobs` holds its own token
    (None for the first), its offsets count from the start of the prompt text."""
    offsets, pos = [], 0
    for t in prompt:
        offsets.append(pos)
        pos += len(t.text)
    return {
        "tokens": [token_label(t.id, t.text, as_ids) for t in prompt] + generated["tokens"],
        "token_logprobs": [t.logprob for t in prompt] + generated["token_logprobs"],
        "top_logprobs": [
            None if t.logprob is None else {token_label(t.id, t.text, as_ids): t.logprob} for t in prompt
        ]
        + generated["top_logprobs"],
        "text_offset": offsets + generated["text_offset"],
    }
