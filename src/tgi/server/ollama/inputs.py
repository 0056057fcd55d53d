"""An Ollama request as the server's own inputs: the served model its `model` names, the chat-template
messages of `/api/chat` (and of a templated `/api/generate`), the tool plan of `tools` (the grammar-backed tool
calling of `tgi.server.chat.tools`, `tool_choice` auto as Ollama has no other), the grammar of `format`,
`think` and `keep_alive` as the server can serve them.

A message's `images` are base64 data: each becomes an image part (`tgi.server.images.sources.image_part`,
its format read from its bytes) named by its field (`messages[i].images[j]`, `images[j]`), then fetched and
checked as every API's images are; a model that takes none refuses them by that name. An assistant's
`tool_calls` are written as OpenAI's (`arguments` as JSON text), which the templates know; a `tool` message's
`tool_name` is the template's `name`. An earlier assistant turn's `thinking` is not shown (as in Ollama).
"""

from __future__ import annotations

import json
from typing import Any

from tgi.core.guided import Grammar
from tgi.server.chat.template import template_options
from tgi.server.chat.tools import ToolPlan, new_call_id, plan_tools, render_inputs
from tgi.server.flags.parsers import duration_value
from tgi.server.http.errors import ApiError, unsupported, validation_error
from tgi.server.images.sources import image_part
from tgi.server.lora.adapters import served_adapters
from tgi.server.ollama.schemas import ChatRequest, GenerateRequest, GenerationFields, Message
from tgi.server.validation.grammars import json_schema_grammar

#: the tag `/api/tags` lists the served model with (Ollama's default tag)
TAG = "latest"


def tagged(name: str) -> str:
    """`name` as Ollama lists it: with its tag (`:latest` where it has none)."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:{TAG}"


def _bare(name: str) -> str:
    return name[: -len(TAG) - 1] if name.endswith(f":{TAG}") else name


def served_model(service: Any, model: str) -> str | None:
    """The LoRA adapter `model` names (None: the base model), the served name or an adapter's, bare or with
    `:latest`; any other name is Ollama's 404 naming what is served."""
    base, adapters = service.model_name, served_adapters(service)
    if not model:
        raise validation_error("`model` is required", "model")
    if model in (base, tagged(base)) or _bare(model) == base:
        return None
    for adapter in adapters:
        if model in (adapter, tagged(adapter)):
            return adapter
    served = ", ".join(f"'{tagged(m)}'" for m in (base, *adapters))
    raise ApiError(404, f"model '{model}' not found: this server serves {served}", "model_not_found")


def keep_alive_seconds(value: int | float | str | None) -> float | None:
    """`keep_alive` in seconds: a number is seconds, a string a number of seconds or a Go duration (`5m`,
    `-1h30m`); None when absent. A malformed one is a 400 naming it."""
    try:
        return duration_value(value)
    except ValueError:
        raise validation_error(
            f"`keep_alive` must be a number of seconds or a duration such as `-1m`, got {value!r}",
            "keep_alive",
        ) from None


def check_keep_alive(service: Any, value: int | float | str | None) -> None:
    """On a server of one model, the model stays loaded whatever a request says: a negative `keep_alive`
    (Ollama's "keep it loaded") or none; one that would unload it after some idle time, or at once (0), is
    refused by name. On a server of several (`tgi.server.served_models`), it is the model's keep-alive from
    this request's end on (read there); here it is only checked."""
    seconds = keep_alive_seconds(value)
    if service.pool is None and seconds is not None and seconds >= 0:
        raise unsupported(
            "keep_alive",
            "is not served: the model stays loaded here, started and stopped with the server "
            "(give a negative duration, or none; a server of several models unloads them)",
        )


def template_kwargs(req: GenerationFields, reasoning: bool, trusted: bool) -> dict:
    """The chat template's arguments for `think` (checked against `reasoning`: the server has a reasoning
    parser for this model): with one, absent or true (the model's thinking comes back as `thinking`), or a
    level (`low`, `medium`, `high`: the template's `reasoning_effort`); without one, absent or false."""
    think = req.think
    effort = None
    if reasoning:
        if think is False:
            raise unsupported(
                "think", "is not served as false: the model decides whether to think here (give true or none)"
            )
        if isinstance(think, str):
            if think not in ("low", "medium", "high"):
                raise validation_error(
                    f"`think` must be true, false, `low`, `medium` or `high`, got {think!r}", "think"
                )
            effort = think
    elif think not in (None, False):
        raise unsupported(
            "think", "is not served: this server returns no thinking (it runs without --reasoning-parser)"
        )
    return template_options(trusted, reasoning_effort=effort, effort_field="think").kwargs()


def format_grammar(value: str | dict | None) -> Grammar | None:
    """`format`: `"json"` (any JSON value, an object here as Ollama's models are asked), a JSON schema, or
    empty (none)."""
    if value in (None, ""):
        return None
    if value == "json":
        return Grammar.json_object()
    if isinstance(value, dict):
        return json_schema_grammar(value, "format")
    raise validation_error(f'`format` must be "json" or a JSON schema (an object), got {value!r}', "format")


def _images(images: list[str] | None, where: str) -> list[dict]:
    return [image_part(f"data:;base64,{data}", f"{where}[{j}]") for j, data in enumerate(images or ())]


def _content(text: str, images: list[dict]) -> str | list[dict]:
    """A user message's content: its text, or with images its images then its text (Ollama places a
    message's images before its text)."""
    return [*images, {"type": "text", "text": text}] if images else text


def _message(m: Message, i: int, names: dict[str, str]) -> dict:
    where = f"messages[{i}]"
    if m.role == "user":
        return {"role": "user", "content": _content(m.content, _images(m.images, f"{where}.images"))}
    if m.role == "tool":
        out: dict[str, Any] = {"role": "tool", "content": m.content}
        name = m.tool_name
        if name:
            out["name"] = name
            if name in names:
                out["tool_call_id"] = names[name]
        return out
    out = {"role": m.role, "content": m.content}
    if m.tool_calls:
        calls = []
        for call in m.tool_calls:
            call_id = call.id or new_call_id()
            names.setdefault(call.function.name, call_id)
            arguments = json.dumps(call.function.arguments, ensure_ascii=False)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": arguments},
                }
            )
        out["tool_calls"] = calls
    return out


def chat_messages(req: ChatRequest) -> list[dict]:
    """`/api/chat`'s messages as chat-template messages (module docstring)."""
    names: dict[str, str] = {}  # tool name -> the id of its latest call (for templates that show ids)
    return [_message(m, i, names) for i, m in enumerate(req.messages)]


def generate_messages(req: GenerateRequest) -> list[dict]:
    """A templated `/api/generate`'s conversation: its `system`, then its `prompt` (and `images`) as the
    user's turn, as Ollama renders the model's template."""
    out = [{"role": "system", "content": req.system}] if req.system else []
    return [*out, {"role": "user", "content": _content(req.prompt, _images(req.images, "images"))}]


def tool_plan(tools: list[dict] | None) -> ToolPlan | None:
    """`tools` (Ollama's are OpenAI's shape: `{"type": "function", "function": {...}}`), the model choosing
    whether to call one (Ollama has no `tool_choice`)."""
    return plan_tools(tools, None)


def prompt_messages(
    req: ChatRequest, chat_template: Any, reasoning: bool, trusted: bool
) -> tuple[list[dict], dict, ToolPlan | None]:
    """The messages and template arguments of `/api/chat`'s prompt, and its tool plan."""
    plan = tool_plan(req.tools)
    messages, kwargs = render_inputs(chat_messages(req), plan, chat_template, None)
    return messages, {**kwargs, **template_kwargs(req, reasoning, trusted)}, plan
