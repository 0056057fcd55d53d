"""vLLM's `structured_outputs` and `guided_grammar` through the official `openai` client against a real
server (default launch): each output matches what it asked for."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

pytestmark = pytest.mark.e2e

POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}, "seen": {"type": "boolean"}},
    "required": ["x", "y", "seen"],
}
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}},
    "required": ["city"],
}


@pytest.fixture(scope="module")
def openai_client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="-", timeout=120, max_retries=0)


def _chat(client, text: str, **extra) -> str:
    out = client.chat.completions.create(
        model="tgi", messages=[{"role": "user", "content": text}], max_tokens=30, temperature=0, **extra
    )
    return out.choices[0].message.content


def test_json_without_whitespace(openai_client):
    so = {"json": POINT, "disable_any_whitespace": True}
    text = _chat(openai_client, "A point as JSON.", extra_body={"structured_outputs": so})
    assert re.fullmatch(r'\{"x":-?\d+,"y":-?\d+,"seen":(true|false)\}', text), text
    jsonschema.validate(json.loads(text), POINT)


def test_a_choice_streamed(openai_client):
    chunks = openai_client.chat.completions.create(
        model="tgi",
        messages=[{"role": "user", "content": "Is the sky green?"}],
        max_tokens=10,
        stream=True,
        extra_body={"structured_outputs": {"choice": ["Yes, it is", "No, it is not"]}},
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text in ("Yes, it is", "No, it is not")


@pytest.mark.parametrize(
    "body",
    [
        {"guided_grammar": 'root ::= item (", " item)*\nitem ::= [a-z]+'},
        {"structured_outputs": {"grammar": 'start: item (", " item)*\nitem: /[a-z]+/'}},
    ],
    ids=["gbnf-guided_grammar", "lark-structured_outputs"],
)
def test_a_context_free_grammar_on_completions(openai_client, body):
    out = openai_client.completions.create(
        model="tgi", prompt="Three fruits, comma separated:", max_tokens=12, temperature=0, extra_body=body
    )
    text = out.choices[0].text
    if out.choices[0].finish_reason == "stop":
        assert re.fullmatch(r"[a-z]+(, [a-z]+)*", text), text
    else:  # cut short by max_tokens: a prefix of the grammar's language, never off it
        assert re.fullmatch(r"[a-z]+(,( [a-z]*)?)*", text), text


def test_a_structural_tag_constrains_what_follows_its_trigger(openai_client):
    tag = {
        "type": "structural_tag",
        "structures": [{"begin": "<call=weather>", "schema": WEATHER, "end": "</call>"}],
        "triggers": ["<call="],
    }
    shots = (
        'Q: weather in Rome?\nA: <call=weather>{"city": "Rome"}</call>\n'
        'Q: weather in Oslo?\nA: <call=weather>{"city": "Oslo"}</call>\n'
        "Q: weather in Paris?\nA:"
    )
    out = openai_client.completions.create(
        model="tgi",
        prompt=shots,
        max_tokens=40,
        temperature=0,
        stop=["\nQ:"],
        extra_body={"response_format": tag},
    )
    text = out.choices[0].text
    calls = re.findall(r"<call=(.*?)>(.*?)</call>", text, re.S)
    assert calls, text  # the few shots make the model call; what follows its trigger is the structure
    for name, args in calls:
        assert name == "weather"
        jsonschema.validate(json.loads(args), WEATHER)
