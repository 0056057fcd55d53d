"""OpenAI Responses' request schema (`POST /v1/responses`); the response and its stream events are built in
`tgi.server.responses.format` and `tgi.server.responses.events`.

Served: `input` (a string, or items: messages whose content is a string or `input_text` / `output_text`
parts, and `input_image` parts for a model that takes images; `function_call` and `function_call_output`
items), `instructions`, function `tools`, `tool_choice`,
`parallel_tool_calls` (one call per response at most, which either value allows), `text.format` (`text`,
`json_object`, `json_schema`), `max_output_tokens`, `temperature`, `top_p`, `stream`, `store`,
`previous_response_id`, `metadata` (returned and stored), `user` and `safety_identifier` (no effect on
generation, in OpenAI's API either), `reasoning.effort` (the chat template's `reasoning_effort`, as vLLM
passes it), and an assistant message that ends `input` with `status` `in_progress` or `incomplete` is
continued, as vLLM continues it (`tgi.server.chat.template`). Everything else OpenAI defines is refused by
name unless it asks for the default behaviour (`tgi.server.validation.fields`): built-in tools, an image's
`file_id`, files and audio in the input, `background`, `reasoning.summary`, `include`, `truncation: auto`,
`top_logprobs`, `conversation`, `prompt`...
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import Field

from tgi.server.validation.fields import NEUTRAL, RequestModel

#: message roles an input message may have
ROLES = ("user", "assistant", "system", "developer")
#: content part types served, by the message role that may send them (`reasoning_text`: a reasoning item's)
TEXT_PARTS = {
    "input_text": ("user", "system", "developer"),
    "output_text": ("assistant",),
    "reasoning_text": (),
}
#: an image part (served for a model with a vision tower), and every part type with the roles that send it
INPUT_IMAGE = "input_image"
PARTS = {**TEXT_PARTS, INPUT_IMAGE: ("user", "system", "developer")}
#: OpenAI's limits on `metadata`: pairs, key and value lengths
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512

_UNSERVED: dict[str, tuple[Any, ...]] = {
    "background": (None, False),
    "background_options": NEUTRAL,
    "conversation": NEUTRAL,
    "context_management": NEUTRAL,
    "include": NEUTRAL,
    "max_tool_calls": NEUTRAL,
    "prompt": NEUTRAL,
    "prompt_cache_key": NEUTRAL,
    "prompt_cache_options": NEUTRAL,
    "prompt_cache_retention": NEUTRAL,
    "service_tier": (None, "auto", "default"),
    "stream_options": NEUTRAL,
    "top_logprobs": (None, 0),
    "truncation": (None, "disabled"),
    "moderation": NEUTRAL,
    "image": NEUTRAL,
    "access_programs": NEUTRAL,
}


class ContentPart(RequestModel):
    """One part of a message's content: `input_text` or `input_image` (user, system, developer), or
    `output_text` (assistant, as a previous response's output comes back). An `input_image`'s `image_url`
    is a `data:` or `http(s)` URL, taken as chat completions take an `image_url` part (`tgi.server.images`);
    `file_id` is refused (no file store here), and a `detail` but `auto` (the model's processor decides the
    resolution)."""

    type: str
    text: str | None = None
    image_url: str | None = None  # input_image
    detail: str | None = None  # input_image: `auto` only
    file_id: str | None = None  # input_image: refused (no file store)
    annotations: list[Any] | None = None  # of an `output_text` given back: none are made here
    logprobs: list[Any] | None = None  # of an `output_text` given back: not read
    KNOWN: ClassVar = {
        "file_data": NEUTRAL,
        "file_url": NEUTRAL,
        "filename": NEUTRAL,
        "input_audio": NEUTRAL,
        "refusal": NEUTRAL,
        "prompt_cache_breakpoint": NEUTRAL,
    }

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.type not in PARTS:
            yield "type", f"is {self.type!r}: this server takes {', '.join(PARTS)} parts"
        elif self.type == INPUT_IMAGE:
            if self.file_id is not None:
                yield "file_id", "is not served: this server has no file store (give `image_url`)"
            elif self.image_url is None:
                yield "image_url", "is required in an `input_image` part (a data: or http(s) URL)"
            elif self.detail not in (None, "auto"):
                yield "detail", f"{self.detail!r} is not served: the model's processor decides the resolution"
        elif self.text is None:
            yield "text", f"is required in an `{self.type}` part"
        else:
            for name in ("image_url", "detail", "file_id"):
                if getattr(self, name) is not None:
                    yield name, f"is a field of an `input_image` part, not of an `{self.type}` part"


class InputItem(RequestModel):
    """One item of `input`: a message (`type` "message", or no `type` with a `role`), a `function_call`
    (a call the model made), a `function_call_output` (its result) or a `reasoning` item (the model's
    reasoning, given to the chat template as the next assistant message's `reasoning_content`)."""

    type: str | None = None
    role: str | None = None
    content: str | list[ContentPart] | None = None
    id: str | None = None  # an item given back from a previous response: its id, not read
    status: str | None = None  # likewise
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[ContentPart] | None = None
    KNOWN: ClassVar = {
        "phase": NEUTRAL,
        "namespace": NEUTRAL,
        "caller": NEUTRAL,
        "summary": NEUTRAL,  # of a reasoning item: none are made or read here
        "encrypted_content": NEUTRAL,
    }

    @property
    def kind(self) -> str:
        return self.type or "message"

    def refusals(self) -> Iterator[tuple[str, str]]:
        kind = self.kind
        if kind == "message":
            if self.role not in ROLES:
                yield "role", f"must be one of {', '.join(ROLES)}, got {self.role!r}"
            elif self.content is None:
                yield "content", "is required in a message"
            elif isinstance(self.content, list):
                for i, part in enumerate(self.content):
                    if part.type in PARTS and self.role not in PARTS[part.type]:
                        yield f"content[{i}].type", f"`{part.type}` is not a part of a {self.role} message"
        elif kind == "function_call":
            for name in ("call_id", "name", "arguments"):
                if getattr(self, name) is None:
                    yield name, "is required in a `function_call` item"
        elif kind == "reasoning":
            for i, part in enumerate(self.content if isinstance(self.content, list) else ()):
                if part.type != "reasoning_text":
                    yield (
                        f"content[{i}].type",
                        f"is {part.type!r}: a reasoning item holds reasoning_text parts",
                    )
            if isinstance(self.content, str):
                yield "content", "of a reasoning item is a list of reasoning_text parts"
        elif kind == "function_call_output":
            for name in ("call_id", "output"):
                if getattr(self, name) is None:
                    yield name, "is required in a `function_call_output` item"
            for i, part in enumerate(self.output if isinstance(self.output, list) else ()):
                if part.type == INPUT_IMAGE:
                    yield f"output[{i}].type", "`input_image` in a function call's output is not served"
        else:
            yield (
                "type",
                f"is {kind!r}: this server takes message, function_call, function_call_output and reasoning "
                "items",
            )

    def text(self) -> str:
        """The text of a message's or a reasoning item's content, or of a call's output (its parts joined)."""
        value = self.output if self.kind == "function_call_output" else self.content
        if isinstance(value, list):
            return "".join(p.text or "" for p in value)
        return value or ""


class Tool(RequestModel):
    """A function tool (`{"type": "function", "name", "description", "parameters", "strict"}`). Calls are
    always generated to match `parameters` (`strict: false` allows that too)."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None
    KNOWN: ClassVar = {
        "defer_loading": (None, False),
        "allowed_callers": NEUTRAL,
        "output_schema": NEUTRAL,
        "async": (None, False),
    }

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.type != "function":
            yield "type", f"is {self.type!r}, a tool this server does not have: it calls function tools only"
        elif self.name is None:
            yield "name", "is required in a function tool"

    def as_chat_tool(self) -> dict:
        """The tool as chat completions write it (`tgi.server.chat.tools` reads that shape)."""
        function: dict[str, Any] = {"name": self.name}
        if self.parameters is not None:
            function["parameters"] = self.parameters
        if self.description is not None:
            function["description"] = self.description
        return {"type": "function", "function": function}


class TextConfig(RequestModel):
    """`text`: the output's `format` (`text`, `json_object`, `json_schema`)."""

    format: dict | None = None
    KNOWN: ClassVar = {"verbosity": (None, "medium")}


class ReasoningConfig(RequestModel):
    """`reasoning`: its `effort` is the chat template's `reasoning_effort` (vLLM's way,
    `tgi.server.chat.template`); no summary is made here."""

    effort: str | None = None
    KNOWN: ClassVar = {"summary": NEUTRAL, "generate_summary": NEUTRAL}


class ResponsesRequest(RequestModel):
    model: str | None = None
    input: str | list[InputItem] = Field(min_length=1)
    instructions: str | None = None
    tools: list[Tool] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    store: bool | None = None  # None: OpenAI's default, true (kept when the server's store keeps any)
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None  # an end-user id: no effect on generation, in OpenAI's API either
    safety_identifier: str | None = None  # likewise
    # vLLM's: only requests with the same salt share prefix-cache blocks (none: with the unsalted only)
    cache_salt: str | None = Field(default=None, min_length=1)
    KNOWN: ClassVar = _UNSERVED

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            yield "max_output_tokens", f"must be >= 1, got {self.max_output_tokens}"
        metadata = self.metadata or {}
        if len(metadata) > MAX_METADATA_PAIRS:
            yield "metadata", f"may hold at most {MAX_METADATA_PAIRS} pairs, got {len(metadata)}"
        for key, value in metadata.items():
            if len(key) > MAX_METADATA_KEY or len(value) > MAX_METADATA_VALUE:
                yield (
                    "metadata",
                    f"keys may be {MAX_METADATA_KEY} characters and values {MAX_METADATA_VALUE} at most",
                )
                return

    def items(self) -> list[InputItem]:
        """`input` as items: a string is one user message."""
        if isinstance(self.input, str):
            return [InputItem(type="message", role="user", content=self.input)]
        return list(self.input)
