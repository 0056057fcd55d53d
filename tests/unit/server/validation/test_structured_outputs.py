"""vLLM's `structured_outputs` and `guided_grammar` read into grammars, and their 422s by name, without a
model (what the grammars accept is checked in tests/unit/core/guided/test_grammar_forms.py, their effect
on a real model in tests/e2e/test_structured_outputs_clients.py)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.core.guided import Grammar, StructuralTag
from tgi.server.app import create_app
from tgi.server.http.errors import ApiError
from tgi.server.openai.schemas import StructuredOutputs
from tgi.server.service.settings import ServerSettings
from tgi.server.validation.grammars import response_format_grammar, structured_outputs_grammar

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TAG = {
    "type": "structural_tag",
    "structures": [{"begin": "<f=x>", "schema": SCHEMA, "end": "</f>"}],
    "triggers": ["<f="],
}


def _grammar(**fields) -> tuple[str, Grammar | None]:
    return structured_outputs_grammar(StructuredOutputs.model_validate(fields))


def test_each_kind_is_the_grammar_of_its_older_spelling():
    assert _grammar(json=SCHEMA) == ("structured_outputs.json", Grammar.json_schema(SCHEMA))
    assert _grammar(json=json.dumps(SCHEMA)) == ("structured_outputs.json", Grammar.json_schema(SCHEMA))
    assert _grammar(regex="[0-9]+") == ("structured_outputs.regex", Grammar.regex("[0-9]+"))
    assert _grammar(choice=["a+", "b"]) == ("structured_outputs.choice", Grammar.regex(r"(?:a\+)|(?:b)"))
    assert _grammar(grammar='root ::= "x"')[1] == Grammar.cfg('root ::= "x"')
    assert _grammar(json_object=True) == ("structured_outputs.json_object", Grammar.json_object())
    tag = Grammar.structural_tags([StructuralTag("<f=x>", SCHEMA, "</f>", ("<f=",))])
    assert _grammar(structural_tag=json.dumps(TAG)) == ("structured_outputs.structural_tag", tag)
    assert _grammar(structural_tag=TAG)[1] == tag == response_format_grammar(TAG)
    assert structured_outputs_grammar(None) == ("structured_outputs", None)


def test_disable_any_whitespace_writes_json_without_it():
    field, grammar = _grammar(json=SCHEMA, disable_any_whitespace=True)
    assert field == "structured_outputs.json"
    style = json.loads(grammar.source)["x-guidance"]
    assert style == {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
    assert _grammar(json=SCHEMA, disable_fallback=True, disable_additional_properties=True)[1] == (
        Grammar.json_schema(SCHEMA)  # one grammar engine, schemas always closed: what they ask holds
    )


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({}, "structured_outputs"),
        ({"json": SCHEMA, "regex": "a"}, "structured_outputs"),
        ({"json": "{not json"}, "structured_outputs.json"),
        ({"grammar": "root ::= ((("}, "structured_outputs.grammar"),
        ({"choice": []}, "structured_outputs.choice"),
        ({"structural_tag": "{"}, "structured_outputs.structural_tag"),
        ({"structural_tag": {**TAG, "triggers": ["<g="]}}, "structured_outputs.structural_tag"),
        ({"structural_tag": {"type": "structural_tag", "format": {}}}, "structured_outputs.structural_tag"),
        ({"structural_tag": {**TAG, "structures": []}}, "structured_outputs.structural_tag.structures"),
    ],
)
def test_what_cannot_be_a_grammar_is_a_422_naming_the_field(fields, param):
    with pytest.raises(ApiError) as info:
        _grammar(**fields)
    assert info.value.status == 422 and info.value.param == param, info.value.message


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"structured_outputs": {"regex": "a+"}}, "structured_outputs.regex"),
        ({"guided_grammar": 'root ::= "a"'}, "guided_grammar"),
        ({"response_format": TAG}, "response_format"),
    ],
)
def test_the_routes_take_them(body, param):
    """The fake engine has no grammar masks: its refusal, by the request's field, shows the grammar came
    through (as every other grammar field's does in test_guided_server.py)."""
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c:
        for path, extra in [("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]}),
                            ("/v1/completions", {"prompt": "Hi"})]:  # fmt: skip
            r = c.post(path, json={**extra, **body})
            assert r.status_code == 422 and "cannot apply grammar masks" in r.text, r.text
            assert r.json()["error"]["param"] == param


def test_options_no_engine_here_has_are_refused_by_name():
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c:
        so = {"regex": "a", "whitespace_pattern": "[ ]?"}
        r = c.post("/v1/completions", json={"prompt": "Hi", "structured_outputs": so})
        assert r.status_code == 422 and "whitespace_pattern" in r.text, r.text
        both = {"prompt": "Hi", "guided_regex": "a", "structured_outputs": {"regex": "b"}}
        r = c.post("/v1/completions", json=both)
        assert r.status_code == 422 and "both constrain the output" in r.text, r.text
