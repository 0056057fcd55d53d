"""What a request asks its output to match: a JSON schema, a regular expression or a Lark grammar.

Plain data (no grammar engine, no torch): it travels in `SamplingParams.grammar`, is hashable (compiled
grammars are cached by it) and is turned into a token mask by `tgi.core.guided.compiler`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

GrammarKind = Literal["json_schema", "regex", "lark"]

#: how JSON is written under a schema unless the schema's own `x-guidance` says otherwise: one space after
#: `,` and `:` (as models write JSON) and no other whitespace, so that a small model cannot spend its
#: token budget on newlines between the fields
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class GrammarError(ValueError):
    """A grammar that cannot be used: invalid, unsupported, or too expensive to compile. The message is
    written for the client (the server answers it with a 422)."""


class CompilerBusyError(RuntimeError):
    """No grammar could be compiled now: the compile queue is full, or no compiler was free in time. The
    grammar is not at fault; the message says why, for the client (the server answers it with a 503)."""


def closed(schema: Any) -> Any:
    """`schema` with `additionalProperties: false` on every object that lists its `properties` and says
    nothing of others. Generation emits the declared properties only (as outlines does, xgrammar's strict
    mode, and OpenAI's `strict: true`): a schema that wants more says so with `additionalProperties`.
    Every value the result allows, `schema` allows."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) if k in _SUBSCHEMAS else v for k, v in schema.items()}
    for key in ("properties", "$defs", "definitions", "patternProperties"):  # maps of name -> schema
        if isinstance(out.get(key), dict):
            out[key] = {k: closed(v) for k, v in out[key].items()}
    if isinstance(out.get("properties"), dict):
        out.setdefault("additionalProperties", False)
    return out


_SUBSCHEMAS = ("items", "anyOf", "oneOf", "allOf", "prefixItems", "not", "additionalProperties", "contains")


@dataclass(frozen=True)
class StructuralTag:
    """One structure of a structural tag: JSON under `schema` between `begin` and `end`, where `begin`
    starts with one of `triggers` (the text that, once generated, starts the structure)."""

    begin: str
    schema: dict[str, Any] | bool
    end: str
    triggers: tuple[str, ...]


@dataclass(frozen=True)
class Grammar:
    """`kind` and its `source` text: a JSON schema (`closed`, serialised in its own key order, which is
    the order the fields are generated in), a regex matched against the
    whole output, or a Lark grammar (llguidance's dialect, which may embed `%json {schema}`)."""

    kind: GrammarKind
    source: str

    @classmethod
    def json_schema(cls, schema: dict[str, Any] | bool | str) -> Grammar:
        """From a schema object (or its JSON text); raises `GrammarError` when it is not JSON."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise GrammarError(f"the JSON schema is not valid JSON: {exc}") from None
        if not isinstance(schema, dict | bool):
            raise GrammarError(f"a JSON schema must be an object, got {type(schema).__name__}")
        return cls("json_schema", json.dumps(closed(schema)))

    @classmethod
    def json_object(cls) -> Grammar:
        """Any JSON object (OpenAI's `response_format: {"type": "json_object"}`)."""
        return cls.json_schema({"type": "object"})

    @classmethod
    def regex(cls, pattern: str) -> Grammar:
        if not isinstance(pattern, str) or not pattern:
            raise GrammarError("a regex grammar needs a non-empty pattern string")
        return cls("regex", pattern)

    @classmethod
    def lark(cls, text: str) -> Grammar:
        if not isinstance(text, str) or not text.strip():
            raise GrammarError("a Lark grammar needs a non-empty grammar text")
        return cls("lark", text)

    @classmethod
    def cfg(cls, text: str) -> Grammar:
        """A context-free grammar in Lark's dialect (llguidance's) or in llama.cpp's GBNF, which is
        rewritten as Lark by llguidance's own converter (what vLLM's guidance backend does with a
        `grammar`); raises `GrammarError` when it is neither."""
        if not isinstance(text, str) or not text.strip():
            raise GrammarError("a grammar needs a non-empty grammar text")
        from llguidance.gbnf_to_lark import any_to_lark  # the grammar engine's converter, loaded on use

        try:
            return cls("lark", any_to_lark(text))
        except Exception as exc:  # the converter raises its own parse errors (ValueError and others)
            raise GrammarError(f"the grammar is neither Lark nor GBNF: {str(exc).splitlines()[0]}") from None

    @classmethod
    def structural_tags(cls, tags: list[StructuralTag]) -> Grammar:
        """Free text in which each `tag.begin` (once the text reaches one of the triggers it starts with)
        is followed by JSON under `tag.schema` (closed, as every schema here) and `tag.end`: vLLM's
        `structural_tag`, built with llguidance's own lazy-trigger grammar."""
        if not tags:
            raise GrammarError("a structural tag needs at least one structure")
        from llguidance import StructTag  # the grammar engine's builder, loaded on use

        built = []
        for tag in tags:
            trigger = next((t for t in tag.triggers if t and tag.begin.startswith(t)), None)
            if trigger is None:
                raise GrammarError(f"the structure beginning {tag.begin!r} starts with none of the triggers")
            built.append(StructTag(trigger=trigger, begin=tag.begin, grammar=closed(tag.schema), end=tag.end))
        try:
            return cls("lark", StructTag.to_grammar(built))
        except (AssertionError, ValueError) as exc:  # the builder checks its input with asserts
            raise GrammarError(f"the structural tag cannot be built: {exc}") from None

    def describe(self) -> str:
        """A short label for logs and metrics (not the whole source)."""
        head = self.source if len(self.source) <= 60 else self.source[:57] + "..."
        return f"{self.kind} {head}"
