"""Prefix caching on the real default model (SmolLM2-135M-Instruct, float32): greedy outputs are the same
with the cache on and off for multi-turn conversations that share a system prompt, in flight together,
with preemption forced by a small KV cache; a repeated prompt still samples; prompt logprobs are computed
whatever the cache holds."""

from __future__ import annotations

import pytest

from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.tokenization import apply_chat_template

pytestmark = pytest.mark.slow

SYSTEM = (
    "You are a careful assistant for a small bookshop. You answer questions about opening hours, orders, "
    "returns and book recommendations. Opening hours are nine to six on weekdays and ten to four on "
    "Saturdays; the shop is closed on Sundays. Orders ship within two days; returns are accepted within "
    "thirty days with a receipt. Keep every answer short and friendly, and never invent a book title."
)
QUESTIONS = [
    ["When do you open on Saturday?", "And on Sunday?"],
    ["Can I return a book I bought last week?", "I lost the receipt."],
    ["Recommend a novel about the sea.", "Something shorter, please."],
    ["How fast do orders ship?", "Can I pick it up instead?"],
]
#: 12 new tokens: a first turn's prompt (100-104 tokens, 7 blocks) then needs an 8th block on its last steps,
#: so that two conversations that took the 14 blocks between them preempt one another
GREEDY = SamplingParams(max_new_tokens=12)


def run_conversations(engine: LLMEngine, tokenizer) -> tuple[list[list[list[int]]], list[int]]:
    """Every conversation's turns, all conversations in flight together at each turn; returns the output
    token ids per conversation and turn, and the cached prompt tokens of each request in order."""
    history = [[{"role": "system", "content": SYSTEM}] for _ in QUESTIONS]
    outputs: list[list[list[int]]] = [[] for _ in QUESTIONS]
    cached: list[int] = []
    for turn in range(len(QUESTIONS[0])):
        for conv, questions in zip(history, QUESTIONS, strict=True):
            conv.append({"role": "user", "content": questions[turn]})
        prompts = [apply_chat_template(tokenizer, conv) for conv in history]
        results = engine.generate(prompts, GREEDY)
        for i, (conv, result) in enumerate(zip(history, results, strict=True)):
            outputs[i].append(result.token_ids)
            cached.append(result.final.num_cached_tokens)
            conv.append({"role": "assistant", "content": result.generated_text})
    return outputs, cached


def test_conversations_give_the_same_greedy_tokens_with_the_cache_on_and_off(make_engine, tokenizer):
    # 14 blocks of 16 = 224 tokens for four conversations of ~100-140 tokens each: decodes preempt
    small = dict(max_batch_total_tokens=224, max_total_tokens=224, max_batch_prefill_tokens=128)
    off = make_engine(prefix_caching=False, **small)
    on = make_engine(prefix_caching=True, **small)
    outputs_off, cached_off = run_conversations(off, tokenizer)
    outputs_on, cached_on = run_conversations(on, tokenizer)
    assert outputs_on == outputs_off
    stats_on, stats_off = on.stats(), off.stats()
    assert stats_on.num_preemptions > 0 and stats_off.num_preemptions > 0
    assert stats_on.prefix_caching and not stats_off.prefix_caching
    assert set(cached_off) == {0} and stats_off.num_prefix_cache_hit_tokens == 0
    # The system prompt's blocks are shared from the first turn on, by every request admitted after the
    # first prefill chunk that computed them (those admitted in the same step compute them too)
    system = len(apply_chat_template(tokenizer, [{"role": "system", "content": SYSTEM}])) // 16 * 16
    first_turn, second_turn = cached_on[: len(QUESTIONS)], cached_on[len(QUESTIONS) :]
    assert sum(c >= system for c in first_turn) >= 2 and all(c >= system for c in second_turn)
    assert stats_on.num_prefix_cache_hit_tokens > 0
    assert stats_on.num_prefill_tokens < stats_off.num_prefill_tokens
    for engine in (on, off):
        stats = engine.stats()
        assert stats.num_free_blocks == stats.num_total_blocks and not engine.has_unfinished()
        engine.block_manager.check_invariants()


def test_a_repeated_prompt_is_read_from_the_cache_and_still_samples(make_engine, prompts):
    engine = make_engine()
    first = engine.generate([prompts["long"]], GREEDY)[0]
    again = engine.generate([prompts["long"]], GREEDY)[0]
    n = len(prompts["long"])
    assert first.token_ids == again.token_ids
    assert first.final.num_cached_tokens == 0 and again.final.num_cached_tokens == (n - 1) // 16 * 16


def test_prompt_logprobs_are_the_same_with_a_warm_cache(make_engine, prompts):
    asked = SamplingParams(max_new_tokens=4, prompt_logprobs=True)
    cold = make_engine(prefix_caching=False).generate([prompts["story"]], asked)[0]
    engine = make_engine()
    engine.generate([prompts["story"]], GREEDY)  # the whole prompt is now cached
    warm = engine.generate([prompts["story"]], asked)[0]
    assert warm.final.num_cached_tokens == 0  # computed: its logprobs were asked for
    assert [t.logprob for t in warm.final.prompt_tokens] == pytest.approx(
        [t.logprob for t in cold.final.prompt_tokens], abs=1e-4
    )
    assert warm.token_ids == cold.token_ids
