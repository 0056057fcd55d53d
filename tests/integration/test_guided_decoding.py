"""Guided decoding on the real default model: every output of a JSON schema parses and validates, every
regex output matches in full, greedy and sampled; constrained requests leave unconstrained ones alone;
grammar state survives preemption and goes with cancellation."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from tgi.core.guided import Grammar
from tgi.core.request import FinishReason, ValidationError
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.guided_cases import JSON_SCHEMAS, REGEXES, schema_prompt
from tgi.core.tokenization import apply_chat_template

pytestmark = pytest.mark.slow


def _chat(tokenizer, text: str) -> list[int]:
    return apply_chat_template(tokenizer, [{"role": "user", "content": text}])


def _check_json(name: str, text: str) -> None:
    value = json.loads(text)  # raises on anything that is not JSON
    jsonschema.validate(value, JSON_SCHEMAS[name])


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_every_schema_gives_json_that_validates(make_engine, tokenizer, sampled):
    engine = make_engine()
    names = list(JSON_SCHEMAS)
    ids = {}
    for i, name in enumerate(names):
        params = SamplingParams(
            max_new_tokens=200,
            grammar=Grammar.json_schema(JSON_SCHEMAS[name]),
            do_sample=sampled,
            temperature=0.8,
            seed=100 + i,
        )
        ids[engine.add_request(_chat(tokenizer, schema_prompt(name)), params)] = name
    texts = {}
    while engine.has_unfinished():
        for event in engine.step():
            if event.finish_reason is not None:
                assert event.finish_reason is FinishReason.EOS, (ids[event.request_id], event.generated_text)
                texts[ids[event.request_id]] = event.generated_text
    assert len(texts) == len(names) == 20
    for name, text in texts.items():
        _check_json(name, text)
    assert len(engine.guided) == 0, "every finished request's parser state is dropped"


@pytest.mark.parametrize("name", list(REGEXES))
def test_regex_outputs_match_in_full(make_engine, tokenizer, name):
    pattern, prompt = REGEXES[name]
    engine = make_engine()
    greedy, sampled = (
        engine.generate(
            [tokenizer.encode(prompt)] * 2,
            SamplingParams(max_new_tokens=40, grammar=Grammar.regex(pattern)),
        )[0],
        engine.generate(
            [tokenizer.encode(prompt)],
            SamplingParams(max_new_tokens=40, do_sample=True, seed=3, grammar=Grammar.regex(pattern)),
        )[0],
    )
    for result in (greedy, sampled):
        assert re.fullmatch(pattern, result.generated_text), result.generated_text


def test_unconstrained_requests_give_the_same_tokens_beside_constrained_ones(make_engine, prompts, tokenizer):
    plain = [prompts["short"], prompts["story"], prompts["chat"]]
    params = SamplingParams(max_new_tokens=24)
    alone = [r.token_ids for r in make_engine().generate(plain, params)]

    engine = make_engine()
    schema = Grammar.json_schema(JSON_SCHEMAS["recipe"])
    order = []
    for i, ids in enumerate(plain):
        order.append(engine.add_request(ids, params))
        engine.add_request(
            _chat(tokenizer, schema_prompt("recipe")),
            SamplingParams(max_new_tokens=60, grammar=schema, do_sample=i % 2 == 1, seed=i),
        )
    tokens = {rid: [] for rid in order}
    while engine.has_unfinished():
        for event in engine.step():
            if event.request_id in tokens:
                tokens[event.request_id].append(event.token_id)
    assert [tokens[rid] for rid in order] == alone


def test_grammar_state_survives_preemption(make_engine, tokenizer):
    names = ["recipe", "items_of_objects", "address", "person", "deeply_nested", "closed_object"]
    requests = [(_chat(tokenizer, schema_prompt(n)), Grammar.json_schema(JSON_SCHEMAS[n])) for n in names]

    def run(engine):
        rids = [engine.add_request(ids, SamplingParams(max_new_tokens=80, grammar=g)) for ids, g in requests]
        texts = {}
        while engine.has_unfinished():
            for event in engine.step():
                if event.finish_reason is not None:
                    texts[event.request_id] = event.generated_text
        return [texts[r] for r in rids], engine.scheduler.num_preemptions

    roomy, _ = run(make_engine())
    tight, preemptions = run(
        make_engine(max_batch_total_tokens=128, max_total_tokens=128, max_batch_prefill_tokens=48)
    )
    assert preemptions > 0, f"the small cache must force preemption: {roomy}"
    assert tight == roomy
    for name, text in zip(names, tight, strict=True):
        _check_json(name, text)


def test_cancelled_and_cut_short_requests(make_engine, tokenizer):
    engine = make_engine()
    grammar = Grammar.json_schema(JSON_SCHEMAS["recipe"])
    ids = _chat(tokenizer, schema_prompt("recipe"))
    cancelled = engine.add_request(ids, SamplingParams(max_new_tokens=100, grammar=grammar))
    short = engine.add_request(ids, SamplingParams(max_new_tokens=5, grammar=grammar))
    engine.step()
    engine.step()
    assert cancelled in engine.guided and short in engine.guided
    engine.abort(cancelled)
    assert cancelled not in engine.guided
    finished = {}
    while engine.has_unfinished():
        for event in engine.step():
            if event.finish_reason is not None:
                finished[event.request_id] = event
    # a schema the model cannot finish within max_new_tokens ends with `length`
    assert finished[short].finish_reason is FinishReason.LENGTH
    assert len(finished[short].generated_text) > 0 and len(engine.guided) == 0


def test_bad_grammars_are_refused_before_queueing(make_engine):
    engine = make_engine()
    cases = [
        (Grammar.json_schema({"type": "objekt"}), "JSON schema"),
        (Grammar.regex("a(b"), "regex"),
        (Grammar.lark("start: undefined_rule"), "Lark grammar"),
    ]
    for grammar, words in cases:
        with pytest.raises(ValidationError, match=words):
            engine.add_request([1, 2, 3], SamplingParams(grammar=grammar))
    with pytest.raises(ValidationError, match="min_new_tokens"):
        engine.add_request([1, 2, 3], SamplingParams(grammar=Grammar.regex("a+"), min_new_tokens=2))
    assert not engine.has_unfinished() and len(engine.guided) == 0
