"""OpenAI tool calling on chat completions: the grammar a `tool_choice` needs, the prompt that tells the
model its tools, and the `tool_calls` read back from the output (whole, or as streamed deltas).

A tool call is generated as one JSON object, `{"name": <function>, "arguments": {...}}`, constrained by a
grammar built from the tools' parameter schemas, so its arguments always validate (unless `max_tokens` cuts
it short: then `finish_reason` is `length`).

`tool_choice`:
* `required` / a named function: the output is a call (of any tool / of that one);
* `auto` (the default with tools): one grammar allows either a call or a plain text answer that does not
  start with `{`, so the model's first token decides. Chosen over TGI's way (a JSON "no tool" call whose
  text answer is a JSON string) because a text answer stays free text, escaped by nobody, and over vLLM's
  (parse whatever the model wrote, with a parser per model family) because it works for any model and a
  call always parses;
* `none`: no tools are shown to the model and nothing is constrained.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from tgi.core.guided import Grammar
from tgi.core.guided.grammar import JSON_STYLE, closed
from tgi.server.http.errors import validation_error

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: the instruction given to models whose chat template knows no tools (TGI's `tool_prompt` replaces it)
DEFAULT_TOOL_PROMPT = (
    "You may call one of the functions below. To call one, answer with only a JSON object of the form "
    '{"name": <function name>, "arguments": <an object of its arguments>}.'
)
_CALL_HEAD = re.compile(r'^\s*\{"name": "(?P<name>[A-Za-z0-9_-]*)", "arguments": ')


@dataclass(frozen=True)
class Function:
    name: str
    description: str | None
    parameters: dict

    def as_tool(self) -> dict:
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass
class ToolPlan:
    """What a request's `tools` and `tool_choice` ask for."""

    choice: Literal["auto", "required", "named", "none"]
    functions: list[Function] = field(default_factory=list)  # the ones the output may call
    shown: list[Function] = field(default_factory=list)  # the ones the model is told of
    grammar: Grammar | None = None

    @property
    def may_call(self) -> bool:
        return self.choice != "none"


def _function(tool: Any, i: int) -> Function:
    where = f"tools[{i}]"
    if (
        not isinstance(tool, dict)
        or tool.get("type") != "function"
        or not isinstance(tool.get("function"), dict)
    ):
        raise validation_error(f'`{where}` must be {{"type": "function", "function": {{...}}}}', where)
    fn = tool["function"]
    name = fn.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise validation_error(
            f"`{where}.function.name` must be 1 to 64 letters, digits, `_` or `-`", f"{where}.function.name"
        )
    parameters = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict):
        raise validation_error(
            f"`{where}.function.parameters` must be a JSON schema object", f"{where}.function.parameters"
        )
    if parameters.get("type", "object") != "object":
        raise validation_error(
            f"`{where}.function.parameters` must describe an object (`type: object`)",
            f"{where}.function.parameters",
        )
    description = fn.get("description")
    if description is not None and not isinstance(description, str):
        raise validation_error(
            f"`{where}.function.description` must be a string", f"{where}.function.description"
        )
    return Function(name, description, parameters)


def _call_schema(functions: list[Function]) -> dict:
    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": f.name}, "arguments": f.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for f in functions
    ]
    return closed({**(calls[0] if len(calls) == 1 else {"anyOf": calls}), "x-guidance": JSON_STYLE})


def plan_tools(tools: list | None, tool_choice: Any) -> ToolPlan | None:
    """The plan for a chat request's `tools` and `tool_choice`; None when it has no tools."""
    if not tools:
        if tool_choice not in (None, "none", "auto"):
            raise validation_error("`tool_choice` needs `tools`", "tool_choice")
        return None
    functions = [_function(t, i) for i, t in enumerate(tools)]
    names = [f.name for f in functions]
    if len(set(names)) != len(names):
        raise validation_error("`tools` names a function twice", "tools")
    choice = "auto" if tool_choice is None else tool_choice
    if choice == "none":
        return ToolPlan("none")
    if choice in ("auto", "required"):
        schema = _call_schema(functions)
        if choice == "required":
            return ToolPlan("required", functions, functions, Grammar.json_schema(schema))
        lark = f"start: call | answer\ncall: %json {json.dumps(schema)}\nanswer: /[^{{\\s][\\s\\S]*/\n"
        return ToolPlan("auto", functions, functions, Grammar.lark(lark))
    if (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(choice.get("function"), dict)
    ):
        name = choice["function"].get("name")
        chosen = [f for f in functions if f.name == name]
        if not chosen:
            raise validation_error(f"`tool_choice` names {name!r}, which is not in `tools`", "tool_choice")
        return ToolPlan("named", chosen, functions, Grammar.json_schema(_call_schema(chosen)))
    raise validation_error(
        '`tool_choice` must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
        "tool_choice",
    )


# -- the prompt -----------------------------------------------------------------------------------------
def template_knows_tools(chat_template: Any) -> bool:
    text = "\n".join(chat_template.values()) if isinstance(chat_template, dict) else str(chat_template or "")
    return "tools" in text


def render_inputs(
    messages: list[dict], plan: ToolPlan | None, chat_template: Any, tool_prompt: str | None
) -> tuple[list[dict], dict]:
    """The messages and template arguments that tell the model its tools: the template's own `tools`
    when it has them, else an instruction and the functions' schemas in the system message. Earlier
    assistant calls are written as the JSON the model is asked to produce when the template cannot
    render `tool_calls`."""
    knows = template_knows_tools(chat_template)
    text = str(chat_template or "")
    out = [_history(m, "tool_calls" in text) for m in messages]
    if plan is None or not plan.shown:
        return out, {}
    if knows:
        return out, {"tools": [f.as_tool() for f in plan.shown]}
    listing = "\n".join(json.dumps(f.as_tool()["function"]) for f in plan.shown)
    instruction = f"{tool_prompt or DEFAULT_TOOL_PROMPT}\n{listing}"
    if out and out[0].get("role") == "system":
        out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{instruction}".strip()}
    else:
        out.insert(0, {"role": "system", "content": instruction})
    return out, {}


def _history(message: dict, template_renders_calls: bool) -> dict:
    calls = message.get("tool_calls")
    if not calls or template_renders_calls:
        return message
    written = []
    for call in calls:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        args = fn.get("arguments", "{}")
        with contextlib.suppress(json.JSONDecodeError):  # unparsable arguments are shown as they came
            args = json.loads(args) if isinstance(args, str) else args
        written.append(json.dumps({"name": fn.get("name"), "arguments": args}))
    rest = {k: v for k, v in message.items() if k != "tool_calls"}
    return {**rest, "content": ((message.get("content") or "") + "\n".join(written)).strip()}


# -- the output -----------------------------------------------------------------------------------------
def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def split_call(text: str) -> tuple[str, str] | None:
    """(name, raw arguments text) of a generated call; the arguments lack the object's closing brace when
    the output was cut short. None when `text` is no call."""
    head = _CALL_HEAD.match(text)
    if head is None:
        return None
    args = text[head.end() :].rstrip()
    if args.endswith("}"):
        try:
            json.loads(text)
            args = args[:-1]  # the call object's own closing brace
        except json.JSONDecodeError:
            pass
    return head.group("name"), args


def message_for(text: str, plan: ToolPlan | None) -> tuple[dict, bool]:
    """The assistant message for a finished output, and whether it is a tool call."""
    if plan is not None and plan.may_call and text.lstrip().startswith("{"):
        call = split_call(text)
        if call is not None:
            name, args = call
            tool_call = {
                "id": new_call_id(),
                "type": "function",
                "function": {"name": name, "arguments": args},
            }
            return {"role": "assistant", "content": None, "tool_calls": [tool_call]}, True
    return {"role": "assistant", "content": text}, False


class CallStream:
    """Turns the streamed text of one choice into chat deltas: `content` for a text answer, OpenAI's
    `tool_calls` deltas for a call (a first delta with the id and name, then pieces of `arguments`; the
    call object's own closing brace is held back and never sent)."""

    def __init__(self, plan: ToolPlan) -> None:
        self.plan = plan
        self.mode: Literal["undecided", "text", "call"] = "undecided" if plan.may_call else "text"
        self.text = ""
        self.sent = 0  # characters of `text` already sent as arguments (call) or content (text)
        self.header_sent = False
        self.id = new_call_id()

    @property
    def is_call(self) -> bool:
        return self.mode == "call"

    def feed(self, piece: str, last: bool) -> list[dict]:
        """Deltas for the next piece of text (`last`: the output ends here)."""
        self.text += piece
        if self.mode == "undecided":
            stripped = self.text.lstrip()
            if not stripped and not last:
                return []
            self.mode = "call" if stripped.startswith("{") else "text"
        if self.mode == "text":
            out, self.sent = self.text[self.sent :], len(self.text)
            return [{"content": out}] if out else []
        return self._call_deltas(last)

    def _call_deltas(self, last: bool) -> list[dict]:
        deltas = []
        head = _CALL_HEAD.match(self.text)
        if head is None:
            return []
        if not self.header_sent:
            self.header_sent, self.sent = True, head.end()
            fn = {"name": head.group("name"), "arguments": ""}
            deltas.append({"tool_calls": [{"index": 0, "id": self.id, "type": "function", "function": fn}]})
        if last:
            call = split_call(self.text)
            end = head.end() + len(call[1]) if call else len(self.text)
        else:
            end = len(self.text.rstrip()) - 1  # hold back what may be the call's closing brace
        if end > self.sent:
            piece, self.sent = self.text[self.sent : end], end
            deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        return deltas
