"""OpenAI Responses' bodies: the response object, its output items (an assistant `message` with one
`output_text` part, or a `function_call`), `usage`, and the chat message an output adds to a stored
conversation."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tgi.core.request import FinishReason

COMPLETED, INCOMPLETE, IN_PROGRESS, FAILED = "completed", "incomplete", "in_progress", "failed"


def new_id(prefix: str) -> str:
    """An id as OpenAI's look: `resp_...`, `msg_...`, `fc_...`."""
    return f"{prefix}_{uuid.uuid4().hex}"


@dataclass
class ResponseContext:
    """What a response shows of its request (the fields OpenAI echoes back), fixed when it is created."""

    model: str
    instructions: str | None = None
    max_output_tokens: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    store: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    text_format: dict = field(default_factory=lambda: {"type": "text"})
    tool_choice: Any = "auto"
    tools: list[dict] = field(default_factory=list)
    user: str | None = None
    safety_identifier: str | None = None
    reasoning_effort: str | None = None
    id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))

    def body(
        self, status: str, output: list[dict], usage: dict | None = None, error: dict | None = None
    ) -> dict:
        """The response object; an incomplete one was cut by its token limit (`status_of`); a failed one
        has its `error` (`{"code", "message"}`)."""
        incomplete = {"reason": "max_output_tokens"} if status == INCOMPLETE else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": None,
            "metadata": self.metadata,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": self.parallel_tool_calls,
            "previous_response_id": self.previous_response_id,
            "reasoning": {"effort": self.reasoning_effort, "summary": None},
            "safety_identifier": self.safety_identifier,
            "service_tier": "default",
            "store": self.store,
            "temperature": self.temperature,
            "text": {"format": self.text_format},
            "tool_choice": self.tool_choice,
            "tools": self.tools,
            "top_logprobs": 0,
            "top_p": self.top_p,
            "truncation": "disabled",
            "usage": usage,
            "user": self.user,
        }


def error_code(status: int) -> str:
    """The `error.code` of a failed response whose generation failed with HTTP `status` (OpenAI's codes:
    an overload is `rate_limit_exceeded`, anything else the server's)."""
    return "rate_limit_exceeded" if status == 429 else "server_error"


def status_of(finish: FinishReason | None) -> str:
    """A finished output's status: cut by `max_output_tokens` (or the model's length) is incomplete."""
    return INCOMPLETE if finish is FinishReason.LENGTH else COMPLETED


def usage(input_tokens: int, output_tokens: int, cached_tokens: int = 0, reasoning_tokens: int = 0) -> dict:
    """OpenAI's Responses usage; `cached_tokens`: prompt tokens read from the prefix cache (the tokens
    written to it are not counted: `cache_write_tokens` is 0); `reasoning_tokens`: the output tokens that
    went to the reasoning (`tgi.server.chat.output.reasoning_tokens`)."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str) -> dict:
    """An assistant message; `text` None: no content part yet (streamed, just added)."""
    content = [] if text is None else [text_part(text)]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def reasoning_item(item_id: str, text: str | None, status: str) -> dict:
    """The model's reasoning (its text as a `reasoning_text` part; no summary is made here); `text` None:
    no content part yet (streamed, just added)."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": content}


def output_items(message: dict, status: str) -> list[dict]:
    """The output items of a finished generation read back as a chat message (`tools.message_for`, or
    the output parsers'): its reasoning, its text (also when empty, if nothing else was made), its calls.
    The last item has `status`; the ones before it were completed."""
    items = []
    if message.get("reasoning_content"):
        items.append(reasoning_item(new_id("rs"), message["reasoning_content"], COMPLETED))
    calls = message.get("tool_calls") or []
    if message.get("content") or not (calls or items):
        items.append(message_item(new_id("msg"), message.get("content") or "", COMPLETED))
    for call in calls:
        fn = call["function"]
        items.append(call_item(new_id("fc"), call["id"], fn["name"], fn["arguments"], COMPLETED))
    items[-1]["status"] = status
    return items


def conversation_message(output: list[dict]) -> dict:
    """The chat message an output adds to the conversation (for `previous_response_id`): its text, its
    calls, and its reasoning as `reasoning_content`."""
    message: dict = {"role": "assistant", "content": ""}
    for item in output:
        if item["type"] == "reasoning":
            message["reasoning_content"] = "".join(part["text"] for part in item["content"])
        elif item["type"] == "message":
            message["content"] += "".join(part["text"] for part in item["content"])
        else:
            call = {"name": item["name"], "arguments": item["arguments"]}
            message.setdefault("tool_calls", []).append(
                {"id": item["call_id"], "type": "function", "function": call}
            )
    return message
