"""Speculative decoding (`--speculate N`, n-gram guesses) on the real default model: the tokens are exactly
those of decoding one token at a time, greedy and sampled (each position is drawn with the request's own
seed and step, so a seed gives the same tokens: the distribution is the same by construction), alone and in
a mixed batch with preemption; stop sequences and max_new_tokens cut as without speculation."""

from __future__ import annotations

import dataclasses

import pytest

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.engine_startup import derive_limits
from tgi.core.request import FinishReason
from tgi.core.sampling_params import SamplingParams

pytestmark = pytest.mark.slow

REPEAT = (
    "Copy the list exactly.\nList: apples, pears, plums, cherries, lemons, limes, figs, dates.\n"
    "Copy: apples, pears, plums,"
)


@pytest.fixture(scope="module")
def spec_engine(engine):
    """`make(speculate, **limits)`: an engine with speculation on the shared runner's weights."""

    def make(speculate: int, **limits) -> LLMEngine:
        base = dict(
            max_batch_total_tokens=4096, max_total_tokens=1024, max_batch_prefill_tokens=256, max_num_seqs=16
        )
        config = EngineConfig(dtype=engine.config.dtype, speculate=speculate, **{**base, **limits})
        config = derive_limits(config, engine.model_info, engine.runner, engine.backend)
        return LLMEngine(engine.backend, engine.runner, engine.tokenizer, config, engine.model_info)

    return make


@pytest.fixture(scope="module")
def plain_runs(spec_engine):
    """`plain(key, prompts, params, **limits)`: `_run` on an engine without speculation, once per `key` for
    the module (the reference every speculating run of the same requests is compared with)."""
    memo = {}

    def plain(key: str, prompts, params, **limits):
        if key not in memo:
            memo[key] = _run(spec_engine(0, **limits), prompts, params)
        return memo[key]

    return plain


def _run(engine: LLMEngine, prompts: list[list[int]], params: list[SamplingParams]):
    rids = [engine.add_request(p, sp) for p, sp in zip(prompts, params, strict=True)]
    done = {}
    tokens = {r: [] for r in rids}
    while engine.has_unfinished():
        for event in engine.step():
            assert event.index == len(tokens[event.request_id]), "events come one per token, in order"
            tokens[event.request_id].append(event.token_id)
            if event.finish_reason is not None:
                done[event.request_id] = event
    return [tokens[r] for r in rids], [done[r] for r in rids]


@pytest.mark.parametrize("k", [1, 5])
def test_greedy_and_sampled_tokens_equal_plain_decoding(spec_engine, plain_runs, prompts, tokenizer, k):
    texts = [
        tokenizer.encode(REPEAT),
        prompts["code"],
        prompts["numbers"],
        prompts["chat"],
        prompts["french"],
    ]
    params = [
        SamplingParams(max_new_tokens=32),
        SamplingParams(max_new_tokens=32, repetition_penalty=1.2),
        SamplingParams(max_new_tokens=32, do_sample=True, seed=7),
        SamplingParams(max_new_tokens=32, do_sample=True, temperature=0.7, top_p=0.9, seed=8, logprobs=True),
        SamplingParams(max_new_tokens=32, do_sample=True, top_k=20, presence_penalty=0.5, seed=9),
    ]
    plain, plain_final = plain_runs("mixed", texts, params)  # computed once for both k
    engine = spec_engine(k)
    fast, fast_final = _run(engine, texts, params)
    assert fast == plain
    assert [e.generated_text for e in fast_final] == [e.generated_text for e in plain_final]
    assert engine.scheduler.num_accepted_draft_tokens > 0, "the copy prompt must accept guesses"
    assert sum(e.num_skipped_tokens for e in fast_final) == engine.scheduler.num_accepted_draft_tokens


def test_equal_under_preemption_and_stops(spec_engine, prompts, tokenizer):
    texts = [tokenizer.encode(REPEAT), prompts["story"], prompts["long"], prompts["list"]]
    params = [
        SamplingParams(max_new_tokens=30, stop=(" lemons",) if i == 0 else (), do_sample=i % 2 == 1, seed=i)
        for i in range(len(texts))
    ]
    limits = dict(max_batch_total_tokens=192, max_total_tokens=160, max_batch_prefill_tokens=64)
    plain, plain_final = _run(spec_engine(0, **limits), texts, params)
    engine = spec_engine(4, **limits)
    fast, fast_final = _run(engine, texts, params)
    assert engine.scheduler.num_preemptions > 0
    assert fast == plain
    assert [e.finish_reason for e in fast_final] == [e.finish_reason for e in plain_final]
    assert fast_final[0].finish_reason is FinishReason.STOP
    bm = engine.block_manager
    assert bm.num_free_blocks == bm.num_blocks
    bm.check_invariants()


def test_no_guesses_under_a_grammar(spec_engine, tokenizer):
    from tgi.core.guided import Grammar

    engine = spec_engine(4)
    params = SamplingParams(max_new_tokens=30, grammar=Grammar.regex("(apples, |pears, |plums, ){3,6}figs"))
    [result] = engine.generate([tokenizer.encode(REPEAT)], params)
    assert result.generated_text.endswith("figs") and engine.scheduler.num_draft_tokens == 0
    assert dataclasses.replace(params, grammar=None).grammar is None


def test_draft_model_guesses_keep_the_tokens(engine, spec_engine, prompts, tokenizer):
    """`--speculative-model`: the default model guessing for itself (the same tokenizer; a model's greedy
    guesses of its own greedy tokens are all accepted), batched over the step's sequences."""
    from tgi.core.engine_startup import load_draft_runner, start_draft
    from tgi.core.loading import default_model_path

    plain_engine = spec_engine(0)
    config = dataclasses.replace(plain_engine.config, speculate=3, speculative_model=default_model_path())
    draft = load_draft_runner(engine.backend, config, engine.model_info, lambda msg: None)
    proposer = start_draft(draft, config)
    texts = [prompts["code"], prompts["story"], tokenizer.encode(REPEAT)]
    params = [
        SamplingParams(max_new_tokens=24),
        SamplingParams(max_new_tokens=24, do_sample=True, seed=4),
    ] * 2
    params = params[: len(texts)]
    plain, _ = _run(plain_engine, texts, params)
    drafted = LLMEngine(engine.backend, engine.runner, engine.tokenizer, config, engine.model_info, proposer)
    fast, final = _run(drafted, texts, params)
    assert fast == plain
    # greedy requests: nearly every guess is right (3 of every 4 tokens come without a step of their own)
    for event, p in zip(final, params, strict=True):
        if not p.do_sample:
            assert event.num_skipped_tokens >= 0.6 * (event.index + 1), event
    assert proposer.blocks.num_free_blocks == proposer.blocks.num_blocks  # finished requests let go
