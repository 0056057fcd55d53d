"""Ollama API request schemas (`POST /api/generate`, `/api/chat`, `/api/show`); the prompt and parameters are
built in `tgi.server.ollama.inputs` and `tgi.server.ollama.options`, the bodies in `tgi.server.ollama.format`.

Served: `model` (the served model's name, bare or with the tag `/api/tags` lists, `:latest`), `stream`
(default true: NDJSON), `format` (`"json"` or a JSON schema, through guided decoding), `options` (the sampling
options: `tgi.server.ollama.options`), `keep_alive` (a negative duration: the model stays loaded, which it
always does here), `think` (with `--reasoning-parser`); `/api/generate`'s `prompt`, `system`, `raw`, `images`
(base64, for a model that takes images); `/api/chat`'s `messages` (roles `system`, `user`, `assistant`,
`tool`; `images` per message; an assistant's `tool_calls` and `thinking`; a tool's `tool_name`) and `tools`.

Refused by name (a 400): `suffix` (no fill-in-the-middle here), `template` (a Go template: the model's own
chat template renders the prompt), `context` (deprecated in Ollama: send the conversation to `/api/chat`),
`logprobs` / `top_logprobs`, the image-generation fields (`width`, `height`, `steps`), and a `keep_alive`
that would unload the model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import Field

from tgi.server.validation.fields import NEUTRAL, RequestModel

#: the roles of `/api/chat`'s messages
ROLES = ("system", "user", "assistant", "tool")

# fields of Ollama's requests that are not served, with the values that ask for nothing more
_UNSERVED: dict[str, tuple[Any, ...]] = {
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "width": NEUTRAL,  # image generation
    "height": NEUTRAL,
    "steps": NEUTRAL,
}


class CallFunction(RequestModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    index: int | None = None  # the call's position among the turn's calls (newer Ollama versions send it)


class ToolCall(RequestModel):
    """An assistant turn's tool call, as Ollama returns it (`function.arguments` an object)."""

    function: CallFunction
    id: str | None = None
    type: str | None = None


class Message(RequestModel):
    role: str
    content: str = ""
    images: list[str] | None = None  # base64
    tool_calls: list[ToolCall] | None = None  # assistant turns
    tool_name: str | None = None  # tool turns: the tool that answered
    thinking: str | None = None  # an earlier assistant turn's: not shown to the model (as in Ollama)

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.role not in ROLES:
            yield "role", f"is {self.role!r}: a message's role is one of {', '.join(ROLES)}"
        elif self.images and self.role != "user":
            yield "images", f"are read in `user` messages only, not in a `{self.role}` message"
        elif self.tool_calls and self.role != "assistant":
            yield "tool_calls", f"are read in `assistant` messages only, not in a `{self.role}` message"


class GenerationFields(RequestModel):
    """What `/api/generate` and `/api/chat` share."""

    model: str
    stream: bool = True
    format: str | dict[str, Any] | None = None  # "json" or a JSON schema
    options: dict[str, Any] | None = None
    keep_alive: int | float | str | None = None
    think: bool | str | None = None
    KNOWN: ClassVar = _UNSERVED


class GenerateRequest(GenerationFields):
    prompt: str = ""
    system: str | None = None
    raw: bool = False
    images: list[str] | None = None  # base64
    suffix: str | None = None  # refused (`refusals`) unless empty
    template: str | None = None  # refused unless empty
    context: list[int] | None = None  # refused unless empty

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.suffix:
            yield "suffix", "is not served: this server does no fill-in-the-middle (send the prompt only)"
        if self.template:
            yield "template", "is not served: the model's own chat template renders the prompt here"
        if self.context:
            yield "context", "is deprecated in Ollama and not served: send the conversation to `/api/chat`"
        if self.raw and self.system:
            yield "system", "is not read with `raw: true`: a raw prompt is sent as it is, with no template"
        if self.raw and self.images:
            yield "images", "are not read with `raw: true`: images are placed by the chat template"


class ChatRequest(GenerationFields):
    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None


class ShowRequest(RequestModel):
    model: str | None = None
    name: str | None = None  # the older clients' name for `model`
    verbose: bool = False  # every `model_info` entry is there either way (no tokenizer vocabulary lists)
