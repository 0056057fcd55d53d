"""Grammars from the APIs' request fields: TGI's `grammar`, OpenAI's `response_format`, vLLM's
`structured_outputs` and its older `guided_*`.

Each function turns a field's value into a `tgi.core.guided.Grammar` or raises the 422 that names the field
(OpenAI's shape on /v1). Whether the grammar can constrain this model's output is the engine's to say: it is
compiled once, by the request's one validation (`LLMEngine.validate`, off the event loop), whose refusal
names the same field.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tgi.core.guided import Grammar, GrammarError, StructuralTag
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


def json_schema_grammar(value: Any, field: str) -> Grammar:
    """A JSON schema given as an object (or its JSON text) as a grammar; the 422 names `field`."""
    return _schema_of(value, field)


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
    if kind == "structural_tag":  # vLLM's
        return structural_tag_grammar(value, field)
    if "value" in value:
        return tgi_grammar(value, field)
    raise validation_error(
        f"`response_format.type` must be `text`, `json_object`, `json_schema` or `structural_tag`, got {kind!r}",
        f"{field}.type",
    )


def _choice(value: Any, field: str) -> Grammar:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
        raise validation_error(f"`{field}` must be a list of non-empty strings", field)
    return _grammar(field, Grammar.regex, "|".join(f"(?:{re.escape(c)})" for c in value))


def vllm_guided_grammar(req: Any) -> tuple[str, Grammar | None]:
    """vLLM's older `guided_json`, `guided_regex`, `guided_choice` or `guided_grammar` (at most one of
    them): (the field, its grammar); ("guided_json", None) when none is given."""
    names = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
    given = [n for n in names if getattr(req, n) is not None]
    if not given:
        return "guided_json", None
    if len(given) > 1:
        raise validation_error(f"give one of {', '.join(f'`{n}`' for n in given)}, not several", given[1])
    name = given[0]
    value = getattr(req, name)
    if name == "guided_json":
        return name, _schema_of(value, name)
    if name == "guided_regex":
        return name, _grammar(name, Grammar.regex, value)
    if name == "guided_grammar":
        return name, _grammar(name, Grammar.cfg, value)
    return name, _choice(value, name)


def structured_outputs_grammar(so: Any) -> tuple[str, Grammar | None]:
    """vLLM's `structured_outputs` (one of `json`, `regex`, `choice`, `grammar` (Lark or GBNF),
    `json_object`, `structural_tag`): (the field, its grammar); ("structured_outputs", None) when absent.
    `disable_any_whitespace` writes JSON without whitespace; `disable_fallback` and
    `disable_additional_properties` hold whatever their value (one grammar engine, schemas always closed)."""
    field = "structured_outputs"
    if so is None:
        return field, None
    kinds = {"json": so.json_, "regex": so.regex, "choice": so.choice, "grammar": so.grammar,
             "json_object": so.json_object or None, "structural_tag": so.structural_tag}  # fmt: skip
    given = [k for k, v in kinds.items() if v is not None]
    if len(given) != 1:
        named = ", ".join(f"`{k}`" for k in kinds)
        raise validation_error(f"`{field}` needs exactly one of {named}; given: {len(given)}", field)
    kind = given[0]
    name = f"{field}.{kind}"
    if kind in ("json", "json_object") and so.disable_any_whitespace:
        schema = {"type": "object"} if kind == "json_object" else _schema_value(so.json_, name)
        return name, _schema_of(_compact(schema), name)
    if kind == "json":
        return name, _schema_of(so.json_, name)
    if kind == "json_object":
        return name, Grammar.json_object()
    if kind == "regex":
        return name, _grammar(name, Grammar.regex, so.regex)
    if kind == "grammar":
        return name, _grammar(name, Grammar.cfg, so.grammar)
    if kind == "choice":
        return name, _choice(so.choice, name)
    tag = so.structural_tag
    if isinstance(tag, str):
        try:
            tag = json.loads(tag)
        except json.JSONDecodeError as exc:
            raise validation_error(f"`{name}` is not valid JSON: {exc}", name) from None
    return name, structural_tag_grammar(tag, name)


def _schema_value(value: Any, field: str) -> Any:
    """A schema given as JSON text, parsed (an object stays as it is)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise validation_error(f"`{field}`: the JSON schema is not valid JSON: {exc}", field) from None
    return value


def _compact(schema: Any) -> Any:
    """`schema` whose JSON is written with no whitespace (llguidance's `x-guidance` at the root, unless
    the schema sets its own)."""
    if not isinstance(schema, dict) or "x-guidance" in schema:
        return schema
    style = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
    return {**schema, "x-guidance": style}


def structural_tag_grammar(value: Any, field: str) -> Grammar:
    """vLLM's structural tag, `{"type": "structural_tag", "structures": [{"begin", "schema", "end"}],
    "triggers": [...]}`: free text in which a structure's `begin` is followed by JSON under its schema and
    its `end`. xgrammar's newer `format` shape is refused by name."""
    if not isinstance(value, dict):
        raise validation_error(f"`{field}` must be an object", field)
    if "format" in value:
        raise validation_error(
            f"`{field}.format` (xgrammar's tag formats) is not supported by this server", field
        )
    structures, triggers = value.get("structures"), value.get("triggers")
    if not isinstance(triggers, list) or not all(isinstance(t, str) and t for t in triggers):
        raise validation_error(f"`{field}.triggers` must be a list of non-empty strings", f"{field}.triggers")
    if not isinstance(structures, list) or not structures:
        raise validation_error(f"`{field}.structures` must be a non-empty list", f"{field}.structures")
    tags = []
    for i, s in enumerate(structures):
        at = f"{field}.structures[{i}]"
        if (
            not isinstance(s, dict)
            or not isinstance(s.get("begin"), str)
            or not isinstance(s.get("end"), str)
        ):
            raise validation_error(f"`{at}` needs a `begin` and an `end` string", at)
        schema = s.get("schema", {"type": "object"})
        if not isinstance(schema, dict | bool):
            raise validation_error(f"`{at}.schema` must be a JSON schema (an object)", f"{at}.schema")
        tags.append(StructuralTag(s["begin"], schema, s["end"], tuple(triggers)))
    return _grammar(field, Grammar.structural_tags, tags)


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
