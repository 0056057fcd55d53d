"""An Anthropic Messages request as the server's own inputs: the chat-template messages (`system`, text,
`tool_use` and `tool_result` blocks written as OpenAI's chat messages, which the templates know), the tool
plan of `tools` / `tool_choice` (`tgi.server.chat.tools`, the grammar-backed tool calling), the grammar of
`output_config.format`, and the sampling parameters.

A user turn's `image` blocks are image parts among its text (`tgi.server.images.sources.image_part`): a
`base64` source as a `data:<media_type>;base64,<data>` URL, named by its `source.data`, a `url` source as
its URL, named by its `source.url`; they are then fetched and checked as every API's images are.
A `tool_use` block of an assistant turn becomes an assistant `tool_calls` entry (its `input` as the
call's JSON arguments); a `tool_result` block becomes a `tool` message with its `tool_use_id` (and the
tool's name, for templates that show it); one with `is_error` is shown to the model as `Error: <content>`.
`thinking` / `redacted_thinking` blocks of earlier turns are not shown (as at Anthropic).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from tgi.core.sampling_params import MAX_STOP_SEQUENCE_CHARS, SamplingParams, stop_too_long
from tgi.server.anthropic.schemas import (
    ASSISTANT_BLOCKS,
    TEXT_BLOCKS,
    USER_BLOCKS,
    Block,
    MessagesRequest,
    PromptFields,
    Tool,
    ToolChoice,
)
from tgi.server.chat.template import template_options
from tgi.server.chat.tools import NAME_PATTERN, ToolPlan, plan_tools, render_inputs
from tgi.server.http.errors import unsupported, validation_error
from tgi.server.images.sources import image_part
from tgi.server.service.settings import ServerSettings
from tgi.server.validation.grammars import one_grammar, refuse_if_disabled, response_format_grammar


def _text(blocks: list[Block], where: str, allowed: tuple[str, ...] = TEXT_BLOCKS) -> str:
    for i, block in enumerate(blocks):
        if block.type not in allowed:
            raise unsupported(f"{where}[{i}].type", f"`{block.type}` blocks are not read here")
    return "".join(b.text or "" for b in blocks if b.type == "text")


def system_text(system: str | list[Block] | None) -> str:
    """`system` as one text (its text blocks joined)."""
    if system is None or isinstance(system, str):
        return system or ""
    return _text(system, "system")


def check_thinking(thinking: dict | None, reasoning: bool) -> None:
    """`thinking` as the server can serve it: with a reasoning parser (`reasoning`) absent or `adaptive`
    (the model decides whether to think, and its thinking is returned), without one absent or `disabled`."""
    if thinking is None:
        return
    kind = thinking.get("type")
    if kind == ("adaptive" if reasoning else "disabled"):
        return
    if reasoning:
        why = (
            'is not supported: the model decides whether to think here (give `{"type": "adaptive"}` or none)'
        )
    else:
        why = "is not supported: this server returns no thinking (it runs without --reasoning-parser)"
    raise unsupported("thinking", why)


def _assistant(blocks: list[Block], where: str) -> dict:
    text = _text(blocks, where, ASSISTANT_BLOCKS)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    calls = []
    for i, block in enumerate(blocks):
        if block.type == "tool_use":
            if not block.id or not block.name or block.input is None:
                raise validation_error(f"`{where}[{i}]` needs `id`, `name` and `input`", f"{where}[{i}]")
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append(
                {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}}
            )
    if calls:
        message["tool_calls"] = calls
    return message


def _part(block: Block, where: str) -> dict:
    """A text or image block as a chat message's content part (module docstring)."""
    source = block.source
    if source is None:
        return {"type": "text", "text": block.text or ""}
    if source.type == "base64":
        return image_part(f"data:{source.media_type};base64,{source.data}", f"{where}.source.data")
    return image_part(source.url or "", f"{where}.source.url")


def _content(parts: list[dict]) -> str | list[dict]:
    """A user message's content: its text joined, or with images its parts in order."""
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _user(blocks: list[Block], where: str, names: dict[str, str]) -> list[dict]:
    """The `tool` messages of the turn's `tool_result` blocks and a `user` message of each run of text and
    images."""
    _text(blocks, where, USER_BLOCKS)
    out: list[dict] = []
    for i, block in enumerate(blocks):
        if block.type in ("text", "image"):
            if not (out and out[-1]["role"] == "user"):
                out.append({"role": "user", "content": []})
            out[-1]["content"].append(_part(block, f"{where}[{i}]"))
            continue
        if not block.tool_use_id:
            raise validation_error(f"`{where}[{i}].tool_use_id` is required", f"{where}[{i}].tool_use_id")
        content = block.content
        if isinstance(content, list):
            content = _text(content, f"{where}[{i}].content")
        content = content or ""
        if block.is_error:
            content = f"Error: {content}"
        message = {"role": "tool", "tool_call_id": block.tool_use_id, "content": content}
        if block.tool_use_id in names:
            message["name"] = names[block.tool_use_id]
        out.append(message)
    return [{**m, "content": _content(m["content"])} if m["role"] == "user" else m for m in out]


def template_messages(req: PromptFields) -> list[dict]:
    """The request's conversation as chat-template messages (module docstring)."""
    out: list[dict] = []
    system = system_text(req.system)
    if system:
        out.append({"role": "system", "content": system})
    names: dict[str, str] = {}  # tool_use id -> tool name
    for i, m in enumerate(req.messages):
        where = f"messages[{i}].content"
        blocks = [Block(type="text", text=m.content)] if isinstance(m.content, str) else m.content
        if m.role == "assistant":
            message = _assistant(blocks, where)
            names.update({c["id"]: c["function"]["name"] for c in message.get("tool_calls", ())})
            out.append(message)
        elif m.role == "user":
            out += _user(blocks, where, names)
        else:
            raise validation_error(
                f"`messages[{i}].role` must be `user` or `assistant`, got {m.role!r}", f"messages[{i}].role"
            )
    return out


def prefill(req: PromptFields) -> bool:
    """Whether the conversation ends with an assistant turn, Anthropic's prefill: the reply continues its
    text (and holds only what follows). As at Anthropic, that text may not end with whitespace; a `tool_use`
    block cannot end the conversation (its result would be missing)."""
    last = len(req.messages) - 1
    message = req.messages[last]
    if message.role != "assistant":
        return False
    blocks = (
        [Block(type="text", text=message.content)] if isinstance(message.content, str) else message.content
    )
    for i, block in enumerate(blocks):
        if block.type == "tool_use":
            raise unsupported(
                f"messages[{last}].content[{i}]",
                "ends the conversation: a final assistant turn (prefill) holds the text the reply continues",
            )
    text = "".join(b.text or "" for b in blocks if b.type == "text")
    if text != text.rstrip():
        raise validation_error(
            "final assistant content cannot end with trailing whitespace", f"messages[{last}].content"
        )
    return True


def _openai_tool(tool: Tool, i: int) -> dict:
    where = f"tools[{i}]"
    if not NAME_PATTERN.match(tool.name):
        raise validation_error(f"`{where}.name` must be 1 to 64 letters, digits, `_` or `-`", f"{where}.name")
    if tool.input_schema.get("type", "object") != "object":
        raise validation_error(
            f"`{where}.input_schema` must describe an object (`type: object`)", f"{where}.input_schema"
        )
    function = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


def _openai_choice(choice: ToolChoice | None) -> Any:
    if choice is None:
        return None
    if choice.type in ("auto", "none"):
        return choice.type
    if choice.type == "any":
        return "required"
    if choice.type == "tool":
        if not choice.name:
            raise validation_error('`tool_choice.name` is required with `"type": "tool"`', "tool_choice.name")
        return {"type": "function", "function": {"name": choice.name}}
    raise validation_error(
        f"`tool_choice.type` must be `auto`, `any`, `tool` or `none`, got {choice.type!r}", "tool_choice.type"
    )


def tool_plan(req: PromptFields) -> ToolPlan | None:
    """The plan of `tools` and `tool_choice` (None without tools)."""
    tools = [_openai_tool(t, i) for i, t in enumerate(req.tools or ())]
    return plan_tools(tools, _openai_choice(req.tool_choice))


def prompt_messages(
    req: PromptFields, chat_template: Any, trusted: bool
) -> tuple[list[dict], dict, ToolPlan | None]:
    """The messages and template arguments that render the request's prompt (a prefill continued; vLLM's
    `chat_template_kwargs` and `output_config.effort` as `reasoning_effort`; `trusted`: the server runs with
    --trust-request-chat-template), and its tool plan."""
    plan = tool_plan(req)
    effort = req.output_config.effort if req.output_config is not None else None
    options = template_options(
        trusted,
        variables=req.chat_template_kwargs,
        reasoning_effort=effort,
        effort_field="output_config.effort",
        continue_final_message=prefill(req) or None,
    )
    messages, kwargs = render_inputs(template_messages(req), plan, chat_template, None)
    return messages, {**kwargs, **options.kwargs()}, plan


def format_grammar(req: PromptFields):
    """`output_config.format` (`{"type": "json_schema", "schema": {...}}`) as a grammar; None without one."""
    fmt = req.output_config.format if req.output_config is not None else None
    if fmt is None:
        return None
    if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise validation_error(
            '`output_config.format` must be {"type": "json_schema", "schema": {...}}', "output_config.format"
        )
    return response_format_grammar(
        {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}
    )


def sampling_params(
    req: MessagesRequest, plan: ToolPlan | None, settings: ServerSettings
) -> tuple[SamplingParams, str | None]:
    """The request's sampling parameters with its one grammar (`tools` or `output_config.format`), and the
    field that asks for it. Anthropic's bounds are checked here (`max_tokens` >= 1, `temperature` in
    [0, 1]); the engine checks the rest."""
    if req.max_tokens < 1:
        raise validation_error(f"`max_tokens` must be >= 1. Given: {req.max_tokens}", "max_tokens")
    if req.temperature is not None and not 0.0 <= req.temperature <= 1.0:
        raise validation_error(f"`temperature` must be in [0, 1]. Given: {req.temperature}", "temperature")
    stops = req.stop_sequences or []
    if len(stops) > settings.max_stop_sequences:
        raise validation_error(
            f"`stop_sequences` supports up to {settings.max_stop_sequences} stop sequences. Given: {len(stops)}",
            "stop_sequences",
        )
    if any(len(s) > MAX_STOP_SEQUENCE_CHARS for s in stops):
        longest = max(len(s) for s in stops)
        raise validation_error(stop_too_long(longest, "stop_sequences"), "stop_sequences")
    greedy = req.temperature == 0
    params = SamplingParams(
        do_sample=not greedy,
        temperature=1.0 if greedy or req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=req.top_k or 0,
        max_new_tokens=req.max_tokens,
        stop=tuple(stops),
        include_stop_str_in_output=False,  # Anthropic's text ends before the stop sequence
    )
    asked = one_grammar(
        ("tools", plan.grammar if plan is not None else None), ("output_config.format", format_grammar(req))
    )
    if asked is None:
        return params, None
    field, grammar = asked
    refuse_if_disabled(grammar, settings.disable_grammar_support, field)
    return replace(params, grammar=grammar), field
