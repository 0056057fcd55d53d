"""JSON schemas and regexes that guided decoding is tested and benchmarked on (the same set for both).

Varied on purpose: nested objects, arrays with item bounds, enums, `anyOf`/`oneOf`, required and optional
fields, string patterns, bounded integers and numbers, nullables. Strings carry a `maxLength` (or a
pattern or enum) because a 135M-parameter model left free inside a string can repeat itself until it
runs out of tokens; the schema still leaves it every choice of content.
"""

from __future__ import annotations

_S = {"type": "string", "maxLength": 16}

JSON_SCHEMAS: dict[str, dict] = {
    "person": {
        "type": "object",
        "properties": {"name": _S, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"],
    },
    "string_array": {
        "type": "array",
        "items": {"type": "string", "maxLength": 12},
        "minItems": 2,
        "maxItems": 4,
    },
    "color_enum": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue"]}},
        "required": ["color"],
    },
    "address": {
        "type": "object",
        "properties": {
            "street": _S,
            "city": _S,
            "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        },
        "required": ["street", "city", "zip"],
    },
    "any_of": {
        "type": "object",
        "properties": {"value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 100}, _S]}},
        "required": ["value"],
    },
    "flags": {
        "type": "object",
        "properties": {"active": {"type": "boolean"}, "admin": {"type": "boolean"}},
        "required": ["active", "admin"],
    },
    "items_of_objects": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999}, "label": _S},
            "required": ["id", "label"],
        },
        "minItems": 1,
        "maxItems": 3,
    },
    "number_enum": {
        "type": "object",
        "properties": {"size": {"enum": [8, 16, 32, 64]}},
        "required": ["size"],
    },
    "date_pattern": {
        "type": "object",
        "properties": {"date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}},
        "required": ["date"],
    },
    "optional_fields": {
        "type": "object",
        "properties": {
            "title": _S,
            "subtitle": _S,
            "pages": {"type": "integer", "minimum": 1, "maximum": 999},
        },
        "required": ["title"],
    },
    "nullable": {
        "type": "object",
        "properties": {"nickname": {"type": ["string", "null"], "maxLength": 10}},
        "required": ["nickname"],
    },
    "bounded_number": {
        "type": "object",
        "properties": {"score": {"type": "number", "minimum": 0, "maximum": 10}},
        "required": ["score"],
    },
    "digit_triple": {
        "type": "array",
        "items": {"type": "integer", "minimum": 1, "maximum": 9},
        "minItems": 3,
        "maxItems": 3,
    },
    "one_of_pets": {
        "oneOf": [
            {
                "type": "object",
                "properties": {
                    "kind": {"const": "cat"},
                    "lives": {"type": "integer", "minimum": 1, "maximum": 9},
                },
                "required": ["kind", "lives"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"kind": {"const": "dog"}, "breed": _S},
                "required": ["kind", "breed"],
                "additionalProperties": False,
            },
        ]
    },
    "deeply_nested": {
        "type": "object",
        "properties": {
            "a": {
                "type": "object",
                "properties": {
                    "b": {
                        "type": "object",
                        "properties": {"c": {"type": "integer", "minimum": 0, "maximum": 9}},
                        "required": ["c"],
                    }
                },
                "required": ["b"],
            }
        },
        "required": ["a"],
    },
    "closed_object": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 0, "maximum": 9999},
            "name": _S,
            "ok": {"type": "boolean"},
        },
        "required": ["id", "name", "ok"],
        "additionalProperties": False,
    },
    "email_pattern": {
        "type": "object",
        "properties": {"email": {"type": "string", "pattern": "^[a-z]{3,8}@[a-z]{3,8}\\.com$"}},
        "required": ["email"],
    },
    "recipe": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 30},
            "ingredients": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": _S, "qty": {"type": "integer", "minimum": 1, "maximum": 10}},
                    "required": ["name", "qty"],
                },
                "minItems": 1,
                "maxItems": 3,
            },
            "vegetarian": {"type": "boolean"},
        },
        "required": ["title", "ingredients", "vegetarian"],
    },
    "exclusive_bounds": {
        "type": "object",
        "properties": {"level": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 5}},
        "required": ["level"],
    },
    "string_lengths": {
        "type": "object",
        "properties": {"code": {"type": "string", "minLength": 3, "maxLength": 6}},
        "required": ["code"],
    },
}

#: name -> (regex, a prompt that invites it): matched against the whole output
REGEXES: dict[str, tuple[str, str]] = {
    "date": (r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])", "Today's date in ISO format is"),
    "phone": (r"\+1-[0-9]{3}-[0-9]{3}-[0-9]{4}", "Call our office at"),
    "email": (r"[a-z][a-z0-9.]{1,15}@[a-z]{2,12}\.(com|org|net)", "Write to the support team at"),
}


def schema_prompt(name: str) -> str:
    """The user message that asks for the schema's JSON (the grammar, not the prompt, enforces it)."""
    return f"Reply with a JSON value for a `{name.replace('_', ' ')}`."
