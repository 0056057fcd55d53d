"""Greedy parity with `transformers` on the real default model (SmolLM2-135M-Instruct, GGUF weights).

In float32 our engine must give exactly the token ids of `transformers`' greedy `generate` on the same GGUF
weights: one request at a time, all in flight together with different arrival times and chunked prefills,
and with a KV cache so small that sequences are preempted and recomputed. In bfloat16 the same prompts
are compared with float32 and the measured agreement is printed (run with `-s` to see it).
"""

from __future__ import annotations

import pytest

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.request import FinishReason
from tgi.core.sampling_params import SamplingParams

pytestmark = pytest.mark.slow

N = 24  # new tokens per prompt
GREEDY = SamplingParams(max_new_tokens=N)
EOS = 2  # <|im_end|>


def run_staggered(engine: LLMEngine, arrivals: list[tuple[int, str, list[int]]], params: SamplingParams):
    """Drive `engine` by hand: request `name` is added just before step `at` (after `at` steps have run).
    Returns ({name: token ids}, {name: finish reason}, [stats after each step])."""
    ids_of: dict[str, str] = {}
    tokens: dict[str, list[int]] = {}
    reasons: dict[str, FinishReason] = {}
    stats = []
    pending = sorted(arrivals, key=lambda a: a[0])
    step = 0
    while pending or engine.has_unfinished():
        while pending and pending[0][0] <= step:
            _, name, prompt = pending.pop(0)
            rid = engine.add_request(prompt, params, request_id=name)
            ids_of[rid] = name
            tokens[name] = []
        for event in engine.step():
            tokens[ids_of[event.request_id]].append(event.token_id)
            if event.finish_reason is not None:
                reasons[ids_of[event.request_id]] = event.finish_reason
        stats.append(engine.stats())
        step += 1
        assert step < 2000, "the engine makes no progress"
    return tokens, reasons, stats


def expected_reason(tokens: list[int]) -> FinishReason:
    return FinishReason.EOS if tokens[-1] == EOS else FinishReason.LENGTH


def assert_same(got: dict[str, list[int]], prompts, hf_greedy_mismatches, n: int = N) -> None:
    mismatches = hf_greedy_mismatches({name: (prompts[name], tokens) for name, tokens in got.items()}, n)
    assert not mismatches, f"token ids differ from transformers (ours, theirs teacher forced): {mismatches}"


def test_prompts_are_varied(prompts):
    lengths = sorted(len(p) for p in prompts.values())
    assert len(prompts) >= 8
    assert lengths[0] <= 8 and lengths[-1] >= 64, lengths  # short and long (chunked over steps below)


#: one request at a time: the shortest prompt, the longest (prefilled in one step), one whose answer ends at
#: EOS (23 tokens) and the chat-templated one; the other prompts run the same path, and every prompt is
#: compared with transformers in flight together and preempted below
ALONE = ("short", "long", "math", "chat")


def test_greedy_one_at_a_time_equals_transformers(make_engine, prompts, hf_greedy_mismatches):
    engine = make_engine()
    got = {}
    for name in ALONE:
        [result] = engine.generate([prompts[name]], GREEDY)
        got[name] = result.token_ids
        assert result.finish_reason == expected_reason(result.token_ids), name
    assert_same(got, prompts, hf_greedy_mismatches)
    assert got["math"][-1] == EOS and len(got["math"]) < N
    # the reference itself is varied (these tokens are transformers'): some prompts end at EOS, some run to
    # the length limit
    assert {expected_reason(tokens) for tokens in got.values()} == {FinishReason.EOS, FinishReason.LENGTH}
    assert engine.stats().num_free_blocks == engine.stats().num_total_blocks


def test_greedy_in_flight_together_with_chunked_prefill_equals_transformers(
    make_engine, prompts, hf_greedy_mismatches, monkeypatch
):
    # A 32-token step budget: every prompt longer than that is prefilled in chunks over several steps,
    # sharing them with the decodes of the requests that came earlier.
    engine = make_engine(max_batch_prefill_tokens=32)
    batches = []
    execute = engine.runner.execute
    monkeypatch.setattr(engine.runner, "execute", lambda batch: batches.append(batch) or execute(batch))
    names = list(prompts)
    arrivals = [
        (at, name, prompts[name]) for at, name in zip([0, 0, 1, 2, 4, 5, 7, 9, 12, 15], names, strict=True)
    ]
    assert len(arrivals) == len(names)
    tokens, reasons, stats = run_staggered(engine, arrivals, GREEDY)
    assert_same(tokens, prompts, hf_greedy_mismatches)
    assert all(reasons[name] == expected_reason(tokens[name]) for name in names)
    assert max(s.num_batch_tokens for s in stats) <= 32
    assert max(s.num_running for s in stats) >= 6, "the requests were not in flight together"
    # some steps ran a partial prompt chunk (no sample) next to decodes
    assert any(
        any(s.is_prefill and not s.sample for s in b.sequences) and any(not s.is_prefill for s in b.sequences)
        for b in batches
    )
    assert stats[-1].num_free_blocks == stats[-1].num_total_blocks


def test_greedy_with_preemption_equals_transformers(make_engine, prompts, hf_greedy_mismatches):
    # 10 blocks of 16 tokens for ten requests of up to ~120 tokens each: sequences are preempted and
    # recomputed from their prompt and the tokens they already had.
    longest = max(len(p) for p in prompts.values()) + N
    engine = make_engine(
        max_batch_total_tokens=160, max_total_tokens=max(128, longest), max_batch_prefill_tokens=64
    )
    arrivals = [(i // 3, name, ids) for i, (name, ids) in enumerate(prompts.items())]
    tokens, _, stats = run_staggered(engine, arrivals, GREEDY)
    assert engine.stats().num_preemptions > 0
    assert_same(tokens, prompts, hf_greedy_mismatches)
    assert stats[-1].num_free_blocks == stats[-1].num_total_blocks == 10


# -- bfloat16 ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16_engine():
    engine = LLMEngine.from_config(
        EngineConfig(
            dtype="bfloat16",
            max_batch_total_tokens=2048,
            max_total_tokens=512,
            max_batch_prefill_tokens=128,
            max_num_seqs=16,
        )
    )
    yield engine
    del engine


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))


def test_bfloat16_agrees_with_float32(make_engine, bf16_engine, prompts):
    params = SamplingParams(max_new_tokens=N, ignore_eos=True)  # fixed lengths: compare every position
    names = list(prompts)
    fp32 = {
        n: r.token_ids
        for n, r in zip(names, make_engine().generate(list(prompts.values()), params), strict=True)
    }
    bf16 = {
        n: r.token_ids
        for n, r in zip(names, bf16_engine.generate(list(prompts.values()), params), strict=True)
    }
    # Free-running: bfloat16 generates on its own; once it picks another token the texts part ways.
    prefix = {n: first_difference(fp32[n], bf16[n]) for n in names}
    prefix_agreement = sum(prefix.values()) / (N * len(names))
    first8 = sum(k >= 8 for k in prefix.values()) / len(names)
    # Per step (teacher-forced): at each position, given float32's tokens so far, does bfloat16 pick
    # float32's next token? After each disagreement bfloat16 restarts from float32's tokens up to it
    # (all prompts in one batch per round); a round costs one batched generation.
    agree = dict(prefix)
    pos = {n: k + 1 for n, k in prefix.items()}  # the first disagreement is counted: go on after it
    while todo := [n for n in names if pos[n] < N]:
        again = bf16_engine.generate(
            [prompts[n] + fp32[n][: pos[n]] for n in todo],
            SamplingParams(max_new_tokens=N - min(pos[n] for n in todo), ignore_eos=True),
        )
        for n, result in zip(todo, again, strict=True):
            k = first_difference(fp32[n][pos[n] :], result.token_ids[: N - pos[n]])
            agree[n] += k
            pos[n] += k + 1
    per_step = sum(agree.values()) / (N * len(names))
    print(
        f"\nbfloat16 vs float32 greedy, {len(names)} prompts x {N} tokens: {per_step:.1%} of steps pick "
        f"float32's token (teacher-forced); free-running, {prefix_agreement:.1%} of tokens agree up to the "
        f"first divergence, {first8:.0%} of prompts agree on their first 8 tokens, "
        f"{sum(k == N for k in prefix.values())} of {len(names)} identical; first divergence: {prefix}"
    )
    assert per_step >= 0.93
    assert prefix_agreement >= 0.6
    assert first8 >= 0.7
