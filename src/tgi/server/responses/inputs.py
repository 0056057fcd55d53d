"""What a Responses request asks the model: its conversation as chat messages (a stored previous response's
conversation, then its own `input` items), its tools and `tool_choice` (`tgi.server.chat.tools`), and the one
grammar its `text.format` or its tools need (`tgi.server.validation.grammars`). Each refusal is a 422 naming the field,
in OpenAI's shape."""

from __future__ import annotations

from typing import Any

from tgi.core.guided import Grammar, GrammarError
from tgi.server.chat.template import TemplateOptions
from tgi.server.chat.template import template_options as template_options_of
from tgi.server.chat.tools import ToolPlan, plan_tools
from tgi.server.http.errors import unsupported, validation_error
from tgi.server.images.sources import IMAGE_PART, image_part
from tgi.server.responses.schemas import INPUT_IMAGE, InputItem, ResponsesRequest
from tgi.server.validation.grammars import one_grammar

_CHOICES = ("none", "auto", "required")


def conversation(items: list[InputItem], history: tuple[dict, ...] = ()) -> list[dict]:
    """`history` (a stored conversation) followed by `items` as chat messages: a `developer` message is a
    system message; a message's `input_image` parts are `image_part`s among its text parts (those of
    `history` named by `previous_response_id`, which brought them); a `reasoning` item starts an assistant
    message (its `reasoning_content`) that the assistant's text and calls after it join, as consecutive
    `function_call` items join the assistant message before them; a `function_call_output` is a `tool`
    message answering a call made earlier in the conversation."""
    out = [_from_history(m) for m in history]
    calls = {c["id"] for m in out for c in m.get("tool_calls") or ()}
    for i, item in enumerate(items):
        kind = item.kind
        previous = out[-1] if out else None
        if kind == "message":
            role = "system" if item.role == "developer" else item.role
            if role == "assistant" and _only_reasoning(previous):
                previous["content"] = item.text()
            else:
                out.append({"role": role, "content": _content(item, f"input[{i}]")})
        elif kind == "reasoning":
            out.append({"role": "assistant", "content": "", "reasoning_content": item.text()})
        elif kind == "function_call":
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            calls.add(item.call_id)
            if previous is not None and previous["role"] == "assistant":
                previous["tool_calls"] = [*(previous.get("tool_calls") or ()), call]
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        else:  # function_call_output (the schema refused every other kind)
            if item.call_id not in calls:
                raise validation_error(
                    f"no function call with call_id {item.call_id!r} comes before this output",
                    f"input[{i}].call_id",
                )
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
    return out


def _content(item: InputItem, where: str) -> str | list[dict]:
    """A message's content for the chat template: its text, or with `input_image` parts a list of text
    parts and `image_part`s (each named by its field under `where`) in order."""
    parts = item.content
    if not isinstance(parts, list) or not any(p.type == INPUT_IMAGE for p in parts):
        return item.text()
    return [
        image_part(p.image_url or "", f"{where}.content[{j}].image_url")
        if p.type == INPUT_IMAGE
        else {"type": "text", "text": p.text or ""}
        for j, p in enumerate(parts)
    ]


def _from_history(message: dict) -> dict:
    """A stored message, its image parts named by `previous_response_id` (the field that brought them)."""
    content = message.get("content")
    if not isinstance(content, list):
        return dict(message)
    parts = [{**p, "field": "previous_response_id"} if p.get("type") == IMAGE_PART else p for p in content]
    return {**message, "content": parts}


def _only_reasoning(message: dict | None) -> bool:
    """An assistant message that holds reasoning only (the text after it joins it)."""
    return (
        message is not None
        and message["role"] == "assistant"
        and "reasoning_content" in message
        and not message["content"]
        and not message.get("tool_calls")
    )


#: the `status` of an assistant message in `input` that asks for it to be continued (vLLM's)
PARTIAL = ("in_progress", "incomplete")


def template_options(req: ResponsesRequest) -> TemplateOptions:
    """How the chat template is applied, as vLLM applies it to a Responses request: `reasoning.effort` is the
    template's `reasoning_effort`; an assistant message that ends `input` with status `in_progress` or
    `incomplete` is continued (the output holds what follows it), any other last item is closed by the
    generation prompt. A partial reasoning item cannot be continued here (refused by name)."""
    effort = req.reasoning.effort if req.reasoning is not None else None
    items = req.items()
    last = items[-1]
    continued = last.kind == "message" and last.role == "assistant" and last.status in PARTIAL
    if last.kind == "reasoning" and last.status in PARTIAL:
        raise unsupported(
            f"input[{len(items) - 1}].status",
            f"{last.status!r} is not served on a reasoning item: an assistant message is continued, not its reasoning",
        )
    return template_options_of(
        False,
        reasoning_effort=effort,
        effort_field="reasoning.effort",
        continue_final_message=continued or None,
    )


def with_instructions(messages: list[dict], instructions: str | None) -> list[dict]:
    """The messages the model sees: `instructions` first, as a system message (they are not carried to
    a continuation, as OpenAI's are not)."""
    return [{"role": "system", "content": instructions}, *messages] if instructions else messages


def chat_tool_choice(value: Any) -> Any:
    """Responses' `tool_choice` in chat completions' shape (`{"type": "function", "name"}` ->
    `{"type": "function", "function": {"name"}}`)."""
    if value is None or value in _CHOICES:
        return value
    if isinstance(value, dict) and value.get("type") == "function":
        if not isinstance(value.get("name"), str):
            raise validation_error("`tool_choice.name` must name a function", "tool_choice.name")
        return {"type": "function", "function": {"name": value["name"]}}
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        raise validation_error(
            f"`tool_choice` of type `{value['type']}` is not supported: this server calls function tools "
            "only",
            "tool_choice",
        )
    raise validation_error(
        '`tool_choice` must be "none", "auto", "required" or {"type": "function", "name": ...}', "tool_choice"
    )


def tool_plan(req: ResponsesRequest) -> ToolPlan | None:
    tools = [t.as_chat_tool() for t in req.tools or ()]
    return plan_tools(tools, chat_tool_choice(req.tool_choice))


def text_format(req: ResponsesRequest) -> dict:
    """`text.format` as the response shows it (`{"type": "text"}` when not given)."""
    given = req.text.format if req.text is not None else None
    return given if given is not None else {"type": "text"}


def format_grammar(value: dict) -> Grammar | None:
    """`text.format`: `text` (None), `json_object`, or `json_schema` with its `name` and `schema`."""
    field = "text.format"
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return Grammar.json_object()
    if kind == "json_schema":
        if not isinstance(value.get("name"), str) or not value["name"]:
            raise validation_error("`text.format.name` is required with `json_schema`", f"{field}.name")
        schema = value.get("schema")
        if not isinstance(schema, dict):
            raise validation_error(
                "`text.format.schema` must be a JSON schema (an object)", f"{field}.schema"
            )
        try:  # `strict` (no properties but the declared ones) is how every schema is generated here
            return Grammar.json_schema(schema)
        except GrammarError as exc:
            raise validation_error(f"`{field}.schema`: {exc}", f"{field}.schema") from None
    raise validation_error(
        f"`text.format.type` must be `text`, `json_object` or `json_schema`, got {kind!r}", f"{field}.type"
    )


def output_grammar(req: ResponsesRequest, plan: ToolPlan | None) -> tuple[str, Grammar] | None:
    """The one grammar the output must match, and the field that asks for it."""
    return one_grammar(
        ("text.format", format_grammar(text_format(req))),
        ("tools", plan.grammar if plan is not None else None),
    )
