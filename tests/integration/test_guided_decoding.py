"""Guided decoding on the real default model: every output of a JSON schema parses and validates, every
regex output matches in full, greedy and sampled; constrained requests leave unconstrained ones alone;
grammar state survives preemption and goes with cancellation."""

from __future__ import annotations

import json
import re
import threading
import time

import jsonschema
import pytest
from fastapi.testclient import TestClient

from tgi.core.async_engine import AsyncEngine
from tgi.core.guided import CompilerBusyError, Grammar, GrammarError
from tgi.core.guided.compiler import GrammarCompiler
from tgi.core.request import EngineRequest, FinishReason, ValidationError
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.guided_cases import JSON_SCHEMAS, REGEXES, schema_prompt
from tgi.core.tokenization import apply_chat_template
from tgi.server.app import create_app

pytestmark = pytest.mark.slow


def _chat(tokenizer, text: str) -> list[int]:
    return apply_chat_template(tokenizer, [{"role": "user", "content": text}])


def _check_json(name: str, text: str) -> None:
    value = json.loads(text)  # raises on anything that is not JSON
    jsonschema.validate(value, JSON_SCHEMAS[name])


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_every_schema_gives_json_that_validates(make_engine, tokenizer, sampled):
    """Each schema once, every other one greedy (an all-greedy batch: the greedy kernel on masked logits)
    and the others sampled (the sampling path); the grammar's mask is the same whichever picks the token."""
    engine = make_engine()
    names = list(JSON_SCHEMAS)[int(sampled) :: 2]
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
    assert len(texts) == len(names) == 10 and len(JSON_SCHEMAS) == 20
    for name, text in texts.items():
        _check_json(name, text)
    assert len(engine.guided) == 0, "every finished request's parser state is dropped"


@pytest.fixture(scope="module")
def regex_results(make_engine, tokenizer):
    """name -> (greedy, sampled) results of its regex: every regex's requests in one batch (its greedy one
    twice, side by side), one run for the module."""
    prompts, params = [], []
    for pattern, prompt in REGEXES.values():
        grammar = Grammar.regex(pattern)
        prompts += [tokenizer.encode(prompt)] * 3
        params += [SamplingParams(max_new_tokens=40, grammar=grammar)] * 2
        params.append(SamplingParams(max_new_tokens=40, do_sample=True, seed=3, grammar=grammar))
    results = make_engine().generate(prompts, params)
    return {name: (results[3 * i], results[3 * i + 2]) for i, name in enumerate(REGEXES)}


@pytest.mark.parametrize("name", list(REGEXES))
def test_regex_outputs_match_in_full(regex_results, name):
    pattern, _ = REGEXES[name]
    for result in regex_results[name]:
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
            SamplingParams(max_new_tokens=32, grammar=schema, do_sample=i % 2 == 1, seed=i),
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


def _slow_grammar(tag: str, n: int = 100_000) -> Grammar:
    """A regex of `n` alternatives: most of a second of real compiling (llguidance builds its lexer; past
    about 120,000 its own limit refuses the grammar)."""
    return Grammar.regex("|".join(f"{tag}{i}x" for i in range(n)))


def _compiler(engine, **limits) -> GrammarCompiler:
    return GrammarCompiler(engine.tokenizer, engine.model_info.vocab_size, engine.eos_token_ids, **limits)


def test_the_engine_never_compiles_a_grammar_even_once_it_left_the_cache(make_engine, monkeypatch):
    """A served request's grammar is compiled once, on a worker thread, and travels with the request: with
    a cache that keeps nothing, neither the event loop nor the engine thread compiles it again."""
    engine = make_engine()
    engine._grammars = _compiler(engine, cache_size=0)  # every compiled grammar is evicted at once
    compile_grammar, threads = engine._grammars.compile, []

    def recording(grammar):
        threads.append(threading.current_thread().name)
        return compile_grammar(grammar)

    monkeypatch.setattr(engine._grammars, "compile", recording)
    body = {"inputs": "My phone number is", "parameters": {"max_new_tokens": 12}}
    body["parameters"]["grammar"] = {"type": "regex", "value": "[0-9]{3}-[0-9]{4}"}
    with TestClient(create_app(AsyncEngine(engine, model_id="tgi"))) as client:
        loop_thread = threading.current_thread().name
        r = client.post("/generate", json=body)
        assert r.status_code == 200, r.text
        assert re.fullmatch("[0-9]{3}-[0-9]{4}", r.json()["generated_text"])
    assert len(threads) == 1, threads
    assert threads[0] not in ("tgi-engine", loop_thread) and not threads[0].startswith("tgi-validation")
    assert len(engine._grammars._cache) == 0
    # a caller that queues a grammar it did not compile is refused before anything runs
    with pytest.raises(ValueError, match="must carry it compiled"):
        engine.add_validated_request(EngineRequest((1, 2, 3), SamplingParams(grammar=Grammar.regex("a+"))))


def test_a_request_compiles_its_grammar_once_whatever_its_choices(make_engine, monkeypatch):
    """Two choices of a chat request, streamed or not, share the one compile of its one validation."""
    engine = make_engine()
    engine._grammars = _compiler(engine, cache_size=0)  # a second compile would not be a cache hit
    compile_grammar, compiled = engine._grammars.compile, []

    def recording(grammar):
        compiled.append(grammar)
        return compile_grammar(grammar)

    monkeypatch.setattr(engine._grammars, "compile", recording)
    body = {
        "messages": [{"role": "user", "content": "Pick a number"}],
        "max_tokens": 6,
        "n": 2,
        "seed": 3,
        "temperature": 1.0,
        "response_format": {"type": "regex", "value": "[0-9]{3}"},
    }
    with TestClient(create_app(AsyncEngine(engine, model_id="tgi"))) as client:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert [
            re.fullmatch("[0-9]{3}", c["message"]["content"]) is not None for c in r.json()["choices"]
        ] == [
            True,
            True,
        ]
        r = client.post("/v1/chat/completions", json={**body, "stream": True})
        assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n"), r.text
    assert compiled == [Grammar.regex("[0-9]{3}")] * 2  # once per request


def test_a_full_compile_queue_is_a_503_with_the_reason(make_engine):
    engine = make_engine()
    engine._grammars = compiler = _compiler(engine, workers=1, max_pending=1)
    engine._grammars.lltokenizer()  # built before the clock runs
    slow = threading.Thread(target=compiler.compile, args=(_slow_grammar("a"),))
    slow.start()
    while compiler.num_pending == 0:
        time.sleep(0.001)
    body = {"inputs": "Hi", "parameters": {"max_new_tokens": 2, "grammar": {"type": "regex", "value": "b+"}}}
    with TestClient(create_app(AsyncEngine(engine, model_id="tgi"))) as client:
        r = client.post("/generate", json=body)
        # refused at once, not after a wait: the slow grammar is still compiling when the answer is read, and
        # the reason is the full queue ("being compiled"), not a wait for a free compiler that ran out
        assert compiler.num_pending == 1, "the slow grammar was still compiling"
        assert r.status_code == 503, r.text
        assert r.json()["error"].startswith("Grammar compilation is busy: 1 grammars are being compiled")
        assert "retry later" in r.json()["error"]
        slow.join()
        assert client.post("/generate", json=body).status_code == 200  # served once the queue drains


def test_a_compile_that_timed_out_counts_against_the_queue_and_blames_no_later_grammar(make_engine):
    """A compile past its time limit is the client's 422; it goes on holding its worker (llguidance cannot
    be interrupted), so the grammars behind it are told the compiler is busy, never that they are at
    fault; once it ends, they compile."""
    engine = make_engine()
    compiler = _compiler(engine, workers=1, max_pending=2, timeout_s=0.2)
    compiler.lltokenizer()
    with pytest.raises(GrammarError, match=r"did not compile within 0\.2 s"):
        compiler.compile(_slow_grammar("a"))
    assert compiler.num_pending == 1  # still compiling, and counted
    with pytest.raises(CompilerBusyError, match=r"no grammar compiler was free within 0\.2 s"):
        compiler.compile(Grammar.regex("b+"))  # waited in the queue: not its fault
    with pytest.raises(CompilerBusyError, match="2 grammars are being compiled"):
        compiler.compile(Grammar.regex("c+"))  # refused at once
    deadline = time.monotonic() + 60
    while compiler.num_pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert compiler.compile(Grammar.regex("c+")).grammar == Grammar.regex("c+")
    assert compiler.compile(_slow_grammar("a")).grammar == _slow_grammar("a")  # cached when it ended
