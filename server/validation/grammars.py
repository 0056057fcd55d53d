"""Grammars from the APIs' request fields: TGI's `grammar`, OpenAI's `response_format`, vLLM's `guided_*`.

Each function turns a field's value into a `tgi.core.guided.Grammar` or raises the 422 that names the field
(OpenAI's shape on /v1). Whether the grammar can constrain this model's output is the engine's to say: it is
compiled once, by the request's one validation (`LLMEngine.validate`, off the event loop), whose refusal
names the same field.
"""

from __future__ import annotations

import re
from typing import Any

from tgi.core.guided import Grammar, GrammarError
from tgi.server.http.errors import validation_error

DISABLED = "grammar-constrained generation is disabled on this server (--disable-grammar-support)"


def _grammar(field: str, build, *args: Any) -> Grammar:
    try:
        return build(*args)
    except GrammarError as exc:
        raise validation_error(f"`{field}`: {exc}", field) from None


def _schema_of(value: Any, field: str) -> Grammar:
    """A JSON schema given as an object or as its JSON text."""
    if not isinstance(value, dict | str | bool):
        raise validation_error(f"`{field}` must be a JSON schema (an object)", field)
    return _grammar(field, Grammar.json_schema, value)


def tgi_grammar(value: Any, field: str = "grammar") -> Grammar:
    """TGI's `{"type": "json", "value": <schema>}`, `{"type": "json_schema", "value": {"name", "schema"}}`
    or `{"type": "regex", "value": "<pattern>"}`."""
    if not isinstance(value, dict) or "type" not in value or "value" not in value:
        raise validation_error(f"`{field}` must be an object with `type` and `value`", field)
    kind, inner = value["type"], value["value"]
    if kind == "json":
        return _schema_of(inner, f"{field}.value")
    if kind == "json_schema":
        if not isinstance(inner, dict) or "schema" not in inner:
            raise validation_error(f"`{field}.value` must be an object with a `schema`", f"{field}.value")
        return _schema_of(inner["schema"], f"{field}.value.schema")
    if kind == "regex":
        if not isinstance(inner, str):
            raise validation_error(f"`{field}.value` must be a regex string", f"{field}.value")
        return _grammar(f"{field}.value", Grammar.regex, inner)
    raise validation_error(
        f"`{field}.type` must be one of `json`, `json_schema` or `regex`, got {kind!r}", f"{field}.type"
    )


def response_format_grammar(value: Any) -> Grammar | None:
    """OpenAI's `response_format`: `text` (None), `json_object`, `json_schema` with `json_schema.schema`;
    and TGI's own shapes on its Messages API (`json`, `regex`, `json_schema` with `value`)."""
    field = "response_format"
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise validation_error("`response_format` must be an object with a `type`", field)
    kind = value["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return Grammar.json_object()
    if kind == "json_schema" and "json_schema" in value:
        spec = value["json_schema"]
        if not isinstance(spec, dict) or "name" not in spec:
            raise validation_error("`response_format.json_schema` needs a `name`", f"{field}.json_schema")
        if "schema" not in spec:  # OpenAI: a schema-less json_schema asks for any JSON object
            return Grammar.json_object()
        # `strict` (OpenAI: no properties but the declared ones) is how every schema is generated here
        return _schema_of(spec["schema"], f"{field}.json_schema.schema")
    if "value" in value:
        return tgi_grammar(value, field)
    raise validation_error(
        f"`response_format.type` must be `text`, `json_object` or `json_schema`, got {kind!r}",
        f"{field}.type",
    )


def vllm_guided_grammar(req: Any) -> tuple[str, Grammar | None]:
    """vLLM's `guided_json`, `guided_regex` or `guided_choice` (at most one of them): (the field, its
    grammar); ("guided_json", None) when none is given."""
    given = [n for n in ("guided_json", "guided_regex", "guided_choice") if getattr(req, n) is not None]
    if not given:
        return "guided_json", None
    if len(given) > 1:
        raise validation_error(f"give one of {', '.join(f'`{n}`' for n in given)}, not several", given[1])
    name = given[0]
    value = getattr(req, name)
    if name == "guided_json":
        return name, _schema_of(value, name)
    if name == "guided_regex":
        if not isinstance(value, str):
            raise validation_error("`guided_regex` must be a string", name)
        return name, _grammar(name, Grammar.regex, value)
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
        raise validation_error("`guided_choice` must be a list of non-empty strings", name)
    return name, _grammar(name, Grammar.regex, "|".join(f"(?:{re.escape(c)})" for c in value))


def one_grammar(*found: tuple[str, Grammar | None]) -> tuple[str, Grammar] | None:
    """The one grammar a request asks for, with the field that asks for it; a 422 when two fields each ask
    for one."""
    named = [(name, g) for name, g in found if g is not None]
    if len(named) > 1:
        raise validation_error(
            f"`{named[0][0]}` and `{named[1][0]}` both constrain the output: give one", named[1][0]
        )
    return named[0] if named else None


def refuse_if_disabled(grammar: Grammar | None, disabled: bool, field: str) -> None:
    if grammar is not None and disabled:
        raise validation_error(DISABLED, field)
