"""Anthropic Messages API request schemas (`POST /v1/messages`, `POST /v1/messages/count_tokens`); the
prompt is built in `tgi.server.anthropic.inputs`, the bodies in `tgi.server.anthropic.format`.

Served: `model` (the served model, or one of its LoRA adapters), `system` (a string or text blocks),
`messages` with `text`, `tool_use` and `tool_result` blocks and, in user turns for a model that takes images,
`image` blocks (`ImageSource`), `tools` (custom tools) and `tool_choice`
(`auto`, `any`, `tool`, `none`), `max_tokens`, `stop_sequences`, `temperature` (0 to 1; 0 is greedy),
`top_p`, `top_k`, `stream`, `output_config.format` (a JSON schema, through guided decoding).

Accepted with no effect, as in Anthropic's API: `metadata` (`user_id` identifies an end user; it never
changes what is generated), `cache_control` (a caching hint: the prefix cache, where it is on, caches every
prompt without being asked), `tool_choice.disable_parallel_tool_use` (a reply here makes one tool call at
most, which either value allows), a tool's `strict` (a call's input always validates against its schema
here), `service_tier` `auto` / `standard_only` (one tier here).

`thinking` follows `--reasoning-parser`: with one, the model's reasoning comes back as `thinking` blocks
and `thinking` may be absent or `adaptive` (the model decides, as it does); without one, absent or
`disabled`. `thinking` and `redacted_thinking` blocks of earlier assistant turns are accepted and not shown
to the model (Anthropic drops them from the context too).

A conversation that ends with an assistant turn is Anthropic's prefill: the reply continues that turn's
text, and its content holds only what follows (`tgi.server.anthropic.inputs.prefill`). vLLM's extensions:
`chat_template_kwargs` (more of the chat template's variables) and `output_config.effort` as the template's
`reasoning_effort` (`tgi.server.chat.template`).

Refused by name (a 400): document and other blocks not named above, images in `system`, assistant turns
or a `tool_result`, `file` image sources (no file store here), the other `thinking` settings
(`enabled` asks for a token budget, which is not kept here), server tools, `mcp_servers`, `container`,
`context_management`, and the other fields below (`fields.py`'s rule).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import Field

from tgi.server.validation.fields import NEUTRAL, RequestModel

#: content block types this server reads (the others are refused by name)
TEXT_BLOCKS = ("text",)
USER_BLOCKS = ("text", "image", "tool_result")
ASSISTANT_BLOCKS = ("text", "tool_use", "thinking", "redacted_thinking")  # thinking: dropped from the prompt

# Anthropic's request fields that are not served, with the values that ask for what this server does anyway
_UNSERVED: dict[str, tuple[Any, ...]] = {
    "mcp_servers": NEUTRAL,
    "container": NEUTRAL,
    "context_management": NEUTRAL,
    "inference_geo": NEUTRAL,
    "speed": (None, "standard"),
    "diagnostics": NEUTRAL,
    "output_format": NEUTRAL,  # the structured-outputs beta's field; `output_config.format` is served
    "user_profile_id": NEUTRAL,
    "workspace_id": NEUTRAL,
    "betas": NEUTRAL,
}


#: the `media_type`s of a `base64` image source that Anthropic's API takes
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


class ImageSource(RequestModel):
    """An `image` block's `source`: `base64` (`media_type` and `data`: taken as a `data:` URL) or `url` (an
    http(s) URL); each image is then checked as chat completions' image URLs are (`tgi.server.images`:
    the bytes against `media_type`, size, pixels, the hosts a URL may name). `file` (Anthropic's Files API)
    is refused: this server has no file store."""

    type: str | None = None  # required (`refusals`); optional so that a document's source parses
    media_type: str | None = None  # base64
    data: str | None = None  # base64
    url: str | None = None  # url
    KNOWN: ClassVar = {"file_id": NEUTRAL}

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.type is None:
            yield "type", "is required in an image source (`base64` or `url`)"
        elif self.type == "file":
            yield "type", "`file` is not served: this server has no file store (give `base64` or `url`)"
        elif self.type not in ("base64", "url"):
            yield "type", f"is {self.type!r}: an image source here is `base64` or `url`"
        elif self.type == "base64" and self.media_type not in IMAGE_MEDIA_TYPES:
            yield "media_type", f"must be one of {', '.join(IMAGE_MEDIA_TYPES)}, got {self.media_type!r}"
        fields = ("media_type", "data") if self.type == "base64" else ("url",)
        for name in ("media_type", "data", "url"):
            if name in fields and not getattr(self, name):
                yield name, f"is required in a `{self.type}` image source"
            elif name not in fields and getattr(self, name) is not None:
                yield name, f"is not a field of a `{self.type}` image source"


class Block(RequestModel):
    """A content block of a message (or of a `tool_result`): the types this server reads, the others
    refused by their `type`."""

    type: str
    text: str | None = None  # text
    id: str | None = None  # tool_use
    name: str | None = None  # tool_use
    input: dict | None = None  # tool_use
    tool_use_id: str | None = None  # tool_result
    content: str | list[Block] | None = None  # tool_result
    is_error: bool | None = None  # tool_result: shown to the model as an error
    cache_control: dict | None = None  # a caching hint (module docstring)
    thinking: str | None = None  # thinking (an earlier turn's: not shown to the model, as at Anthropic)
    signature: str | None = None  # thinking
    data: str | None = None  # redacted_thinking
    source: ImageSource | None = None  # image
    KNOWN: ClassVar = {"citations": NEUTRAL, "title": NEUTRAL, "context": NEUTRAL}

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.type not in (*USER_BLOCKS, *ASSISTANT_BLOCKS):
            yield (
                "type",
                f"`{self.type}` content blocks are not supported: this server reads "
                + ", ".join(f"`{t}`" for t in dict.fromkeys((*USER_BLOCKS, *ASSISTANT_BLOCKS))),
            )
        elif self.type == "image" and self.source is None:
            yield "source", "is required in an `image` block"
        elif self.type != "image" and self.source is not None:
            yield "source", f"is not a field of a `{self.type}` block"
        elif self.type == "tool_result" and isinstance(self.content, list):
            for i, block in enumerate(self.content):
                if block.type == "image":
                    yield f"content[{i}].type", "`image` blocks in a tool result are not served (text only)"


class Message(RequestModel):
    role: str
    content: str | list[Block]


class Tool(RequestModel):
    """A custom tool (`type` absent or `custom`); server tools (`web_search_...`, `bash_...`) are refused."""

    name: str
    input_schema: dict
    description: str | None = None
    type: str | None = None
    cache_control: dict | None = None  # a caching hint (module docstring)
    strict: bool | None = None  # the input always validates here (module docstring)
    KNOWN: ClassVar = {
        "input_examples": NEUTRAL,
        "defer_loading": (None, False),
        "allowed_callers": NEUTRAL,
        "eager_input_streaming": NEUTRAL,
    }

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.type not in (None, "custom"):
            yield "type", f"server tools (`{self.type}`) are not supported: give custom tools"


class ToolChoice(RequestModel):
    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None  # one call at most here (module docstring)


class Metadata(RequestModel):
    user_id: str | None = None  # an end user's id: no effect on generation, in Anthropic's API either


class OutputConfig(RequestModel):
    format: dict | None = None  # {"type": "json_schema", "schema": {...}}
    effort: str | None = None  # the chat template's `reasoning_effort`, as vLLM passes it


class PromptFields(RequestModel):
    """What both routes read to build the prompt."""

    model: str
    messages: list[Message] = Field(min_length=1)
    system: str | list[Block] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    cache_control: dict | None = None  # a caching hint (module docstring)
    output_config: OutputConfig | None = None
    thinking: dict | None = (
        None  # served with --reasoning-parser (`tgi.server.anthropic.inputs.check_thinking`)
    )
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's: more of the chat template's variables
    KNOWN: ClassVar = _UNSERVED


class MessagesRequest(PromptFields):
    max_tokens: int
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stream: bool = False
    metadata: Metadata | None = None
    service_tier: str | None = None  # `auto` / `standard_only`: one tier here (`refusals`)

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.service_tier not in (None, "auto", "standard_only"):
            yield "service_tier", "must be `auto` or `standard_only`"


class CountTokensRequest(PromptFields):
    """`POST /v1/messages/count_tokens`: the prompt's fields only."""
