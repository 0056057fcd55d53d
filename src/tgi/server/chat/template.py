"""How a chat request asks its template to be applied, for every API that renders one: the variables it
passes (vLLM's `chat_template_kwargs`, `reasoning_effort`, `documents`), where the prompt ends
(`add_generation_prompt`, or `continue_final_message`: the last message left open for the model to
continue), and a template of the request's own (`chat_template`).

The semantics are vLLM's (`ChatCompletionRequest.build_chat_params`): the variables reach the template's
renderer as keyword arguments, next to the server's own (`messages`, `tools`); a variable the template does
not read changes nothing (vLLM drops it before rendering, transformers' renderer ignores it); `reasoning_effort`
is the variable `reasoning_effort`, and sets `enable_thinking` to `reasoning_effort != "none"` unless the
request's variables set it; `continue_final_message` with `add_generation_prompt` is refused, as vLLM refuses
it. Two choices beyond vLLM's, so that no field is accepted and ignored: `continue_final_message: true` alone
implies `add_generation_prompt: false` (vLLM's examples set both), and a variable that repeats one of these
fields is honoured when the field is absent (vLLM lets the field's default override it) and refused by name
when it contradicts it.

A request's `chat_template` is code the server runs, and `documents` (vLLM lets any request give them) go
with it here: both only with `--trust-request-chat-template`, else refused by name with the flag named.
Every template, the model's or a request's, is rendered by transformers' `apply_chat_template` in Jinja's
`ImmutableSandboxedEnvironment` (`transformers.utils.chat_template_utils._cached_compile_jinja_template`):
a template that reaches for Python internals fails with a `SecurityError`, answered as a 422 template error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tgi.server.http.errors import unsupported, validation_error

#: the values of `reasoning_effort` (OpenAI's, and vLLM's `max`)
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
#: the flag that lets requests bring their own template and documents
TRUST_FLAG = "--trust-request-chat-template"
#: names the renderer takes from the server (the messages, the tools, how it renders): never a request's
#: variable (`chat_template` has its own field)
RESERVED_VARIABLES = (
    "messages",
    "conversation",
    "tools",
    "chat_template",
    "tokenize",
    "sanitize_control_tokens",
    "padding",
    "truncation",
    "max_length",
    "return_tensors",
    "return_dict",
    "return_assistant_tokens_mask",
    "tokenizer_kwargs",
)


@dataclass(frozen=True)
class TemplateOptions:
    """How one request's prompt is rendered (the defaults: the model's template, closed by the generation
    prompt, with no variables of the request's)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None  # the request's own (trusted by the operator's flag); None: the model's
    documents: list[dict] | None = None
    variables: dict[str, Any] = field(default_factory=dict)  # more of the template's variables

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the tokenizer's `apply_chat_template` (beside the messages and tools)."""
        out: dict[str, Any] = {
            **self.variables,
            "add_generation_prompt": self.add_generation_prompt,
            "continue_final_message": self.continue_final_message,
        }
        if self.chat_template is not None:
            out["chat_template"] = self.chat_template
        if self.documents is not None:
            out["documents"] = self.documents
        return out


def template_options(
    trusted: bool,
    *,
    variables: dict[str, Any] | None = None,
    variables_field: str = "chat_template_kwargs",
    reasoning_effort: str | None = None,
    effort_field: str = "reasoning_effort",
    add_generation_prompt: bool | None = None,
    continue_final_message: bool | None = None,
    chat_template: str | None = None,
    documents: list[dict] | None = None,
) -> TemplateOptions:
    """A request's `TemplateOptions` from its fields (None: not given); `trusted`: the server runs with
    `--trust-request-chat-template`. Every refusal is a 422 naming its field (module docstring)."""
    given = dict(variables or {})
    for name in given:
        if name in RESERVED_VARIABLES:
            why = (
                "is not a template variable: give the template as the request's `chat_template`"
                if name == "chat_template"
                else "is not a template variable: the server sets it"
            )
            raise unsupported(f"{variables_field}.{name}", why)
    fields = {
        "add_generation_prompt": add_generation_prompt,
        "continue_final_message": continue_final_message,
        "documents": documents,
        "reasoning_effort": reasoning_effort,
    }
    for name, value in fields.items():  # a field wins; a variable of its name stands in for it
        if name in given:
            repeated = given.pop(name)
            if value is not None and repeated != value:
                raise validation_error(
                    f"`{variables_field}.{name}` contradicts the request's `{name}`",
                    f"{variables_field}.{name}",
                )
            fields[name] = repeated
    effort = fields["reasoning_effort"]
    if effort is not None:
        if effort not in REASONING_EFFORTS:
            raise validation_error(
                f"`{effort_field}` must be one of {', '.join(REASONING_EFFORTS)}, got {effort!r}",
                effort_field,
            )
        given["reasoning_effort"] = effort
        given.setdefault("enable_thinking", effort != "none")
    return TemplateOptions(
        *_prompt_end(fields["add_generation_prompt"], fields["continue_final_message"]),
        chat_template=_trusted(chat_template, "chat_template", trusted),
        documents=_trusted(fields["documents"], "documents", trusted),
        variables=given,
    )


def _prompt_end(add_generation_prompt: Any, continue_final_message: Any) -> tuple[bool, bool]:
    for name, value in (
        ("add_generation_prompt", add_generation_prompt),
        ("continue_final_message", continue_final_message),
    ):
        if value is not None and not isinstance(value, bool):
            raise validation_error(f"`{name}` must be a boolean", name)
    continued = bool(continue_final_message)
    if continued and add_generation_prompt:
        raise validation_error(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to true: the last message is "
            "either continued or closed by the generation prompt",
            "continue_final_message",
        )
    return (not continued if add_generation_prompt is None else add_generation_prompt), continued


def _trusted(value: Any, name: str, trusted: bool) -> Any:
    if value is not None and not trusted:
        raise unsupported(
            name,
            f"is served only when the server runs with {TRUST_FLAG} (the operator's opt-in: a request's "
            "template is code the server runs)",
        )
    return value
