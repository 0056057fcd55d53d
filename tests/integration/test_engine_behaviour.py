"""The engine's request-level behaviour on the real default model (SmolLM2-135M-Instruct, float32).

Seeded sampling independent of the batch, stop sequences (also across token boundaries), finish reasons,
logprobs / top tokens / prompt logprobs against `transformers`' log-softmax, cancellation returning every
KV block, validation errors, UTF-8-safe streaming text, and the `AsyncEngine` the server runs.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tgi.core.async_engine import AsyncEngine
from tgi.core.engine import LLMEngine
from tgi.core.request import EngineError, FinishReason, TokenEvent, ValidationError
from tgi.core.sampling_params import SamplingParams

pytestmark = pytest.mark.slow

EOS = 2  # <|im_end|>
LOGPROB_TOL = 1e-4


def drain(engine: LLMEngine, max_steps: int = 2000) -> dict[str, list[TokenEvent]]:
    """Step until nothing is left; the events of each request, by request id."""
    events: dict[str, list[TokenEvent]] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished():
            return events
        for event in engine.step():
            events.setdefault(event.request_id, []).append(event)
    raise AssertionError("the engine makes no progress")


def assert_all_blocks_free(engine: LLMEngine) -> None:
    stats = engine.stats()
    assert stats.num_free_blocks == stats.num_total_blocks, stats
    assert stats.num_running == stats.num_waiting == 0, stats
    assert not engine.has_unfinished()


@pytest.fixture(scope="module")
def story_greedy(make_engine, prompts):
    """The greedy output of the "story" prompt: (token ids, text)."""
    [result] = make_engine().generate([prompts["story"]], SamplingParams(max_new_tokens=24, ignore_eos=True))
    return result.token_ids, result.generated_text


# -- sampling ---------------------------------------------------------------------------------------------


def test_seeded_sampling_is_independent_of_the_batch(make_engine, prompts):
    seeded = SamplingParams(
        do_sample=True, temperature=0.8, top_p=0.9, seed=42, max_new_tokens=16, ignore_eos=True
    )
    engine = make_engine(max_batch_prefill_tokens=32)
    [alone] = engine.generate([prompts["story"]], seeded)
    greedy = engine.generate([prompts["story"]], SamplingParams(max_new_tokens=16, ignore_eos=True))[0]
    assert alone.token_ids != greedy.token_ids, "sampling made no difference: the test proves nothing"
    assert alone.final.seed == 42

    # Now among other requests (sampled with other seeds and parameters, and greedy) that arrive before
    # and after it, with the long prompt chunked over steps: the same tokens.
    others = [
        (
            prompts["long"],
            SamplingParams(do_sample=True, temperature=1.2, top_k=20, seed=7, max_new_tokens=20),
        ),
        (prompts["code"], SamplingParams(max_new_tokens=12)),
        (prompts["chat"], SamplingParams(do_sample=True, repetition_penalty=1.3, max_new_tokens=24)),
        (
            prompts["story"],
            SamplingParams(do_sample=True, temperature=0.8, top_p=0.9, seed=43, max_new_tokens=16),
        ),
    ]
    engine.add_request(*others[0])
    engine.add_request(*others[1])
    engine.step()
    engine.step()
    rid = engine.add_request(prompts["story"], seeded)
    twin = engine.add_request(prompts["story"], seeded)  # the same request twice in one batch
    engine.step()
    engine.add_request(*others[2])
    other_seed = engine.add_request(*others[3])
    events = drain(engine)
    assert [e.token_id for e in events[rid]] == alone.token_ids
    assert [e.token_id for e in events[other_seed]] != alone.token_ids  # the seed matters
    assert [e.token_id for e in events[twin]] == alone.token_ids
    assert_all_blocks_free(engine)


# -- stopping ---------------------------------------------------------------------------------------------


def boundary_stop(tokenizer, tokens: list[int], text: str) -> tuple[str, int]:
    """A stop string that spans a token boundary (2 characters before it, 3 after), occurring first there;
    returns it and its index in `text`."""
    for k in range(6, len(tokens) - 4):
        cut = len(tokenizer.decode(tokens[:k]))
        stop = text[cut - 2 : cut + 3]
        if len(stop) == 5 and stop.strip() == stop and text.find(stop) == cut - 2:
            return stop, cut - 2
    raise AssertionError(f"no token boundary fits in {text!r}")


def test_stop_sequences(make_engine, prompts, story_greedy, tokenizer):
    tokens, text = story_greedy
    assert text == tokenizer.decode(tokens)
    word = " clock"  # the greedy output says "... a new model of a clock that ..."
    assert word in text, text
    spanning, at = boundary_stop(tokenizer, tokens, text)
    engine = make_engine()
    for stop, index in ((word, text.index(word)), (spanning, at)):
        params = SamplingParams(max_new_tokens=24, ignore_eos=True, stop=("never-seen", stop))
        [result] = engine.generate([prompts["story"]], params)
        assert result.finish_reason == FinishReason.STOP, (stop, result)
        assert result.final.stop_sequence == stop  # which of the request's stops ended it
        assert result.generated_text == text[:index], stop
        assert "".join(e.text for e in result.events) == result.generated_text  # no part of the stop leaks
        assert result.token_ids == tokens[: len(result.token_ids)] and len(result.token_ids) < len(tokens)
        # it stopped at the token that completed the stop string
        assert stop in tokenizer.decode(result.token_ids)
        assert stop not in tokenizer.decode(result.token_ids[:-1])
    assert_all_blocks_free(engine)


def test_length_and_eos(make_engine, prompts, tokenizer):
    engine = make_engine()
    [length] = engine.generate([prompts["story"]], SamplingParams(max_new_tokens=5))
    assert length.finish_reason == FinishReason.LENGTH and len(length.token_ids) == 5
    assert length.generated_text == tokenizer.decode(length.token_ids)
    # The chat-templated prompt's answer ends with <|im_end|> (its EOS) well within 100 tokens.
    [chat] = engine.generate([prompts["chat"]], SamplingParams(max_new_tokens=100))
    assert chat.finish_reason == FinishReason.EOS and chat.token_ids[-1] == EOS
    assert EOS not in chat.token_ids[:-1] and len(chat.token_ids) < 100
    assert chat.final.special and chat.final.token_text == "<|im_end|>"
    assert "<|im_end|>" not in chat.generated_text
    assert chat.generated_text == tokenizer.decode(chat.token_ids, skip_special_tokens=True)
    # ignore_eos generates through it
    [through] = engine.generate(
        [prompts["chat"]], SamplingParams(max_new_tokens=len(chat.token_ids) + 3, ignore_eos=True)
    )
    assert (
        through.finish_reason == FinishReason.LENGTH
        and through.token_ids[: len(chat.token_ids)] == chat.token_ids
    )
    assert_all_blocks_free(engine)


# -- details ----------------------------------------------------------------------------------------------


def test_logprobs_and_top_tokens_equal_transformers(make_engine, prompts, hf_logprobs):
    engine = make_engine()
    worst = 0.0
    for name in ("story", "chat", "numbers"):
        ids = prompts[name]
        params = SamplingParams(max_new_tokens=12, logprobs=True, top_n_tokens=3)
        [result] = engine.generate([ids], params)
        ref = hf_logprobs(ids + result.token_ids)
        for i, event in enumerate(result.events):
            row = ref[len(ids) - 1 + i]
            assert event.token_id == int(row.argmax())  # greedy
            worst = max(worst, abs(event.logprob - float(row[event.token_id])))
            assert abs(event.logprob - float(row[event.token_id])) < LOGPROB_TOL, (name, i)
            tops = event.top_tokens
            assert len(tops) == 3
            assert tops[0].id == event.token_id and tops[0].logprob == pytest.approx(event.logprob, abs=1e-6)
            assert [t.logprob for t in tops] == sorted((t.logprob for t in tops), reverse=True)
            ref_top = row.topk(3)
            assert [t.id for t in tops] == ref_top.indices.tolist(), (name, i)
            for t, lp in zip(tops, ref_top.values.tolist(), strict=True):
                worst = max(worst, abs(t.logprob - lp))
                assert abs(t.logprob - lp) < LOGPROB_TOL
                assert t.text == engine.tokenizer.decode([t.id])
    print(f"\nlargest |logprob - transformers' log_softmax| over generated and top tokens: {worst:.2e}")


@pytest.mark.parametrize(
    "limits",
    [
        {},  # the whole prompt in one step
        {
            "max_batch_prefill_tokens": 48,
            "max_batch_total_tokens": 128,
            "max_total_tokens": 128,
        },  # chunked (the long prompt's 82 tokens in two steps, the others beside it) and preempted
    ],
    ids=["one-step", "chunked-preempted"],
)
def test_prompt_logprobs_equal_transformers(make_engine, prompts, hf_logprobs, limits):
    engine = make_engine(**limits)
    params = SamplingParams(max_new_tokens=6, ignore_eos=True, prompt_logprobs=True)
    names = ["long", "story", "chat"] if limits.get("max_batch_total_tokens") else ["long"]
    rids = {engine.add_request(prompts[name], params): name for name in names}
    events = drain(engine)
    if limits.get("max_batch_total_tokens"):
        assert engine.stats().num_preemptions > 0
    worst = 0.0
    for rid, name in rids.items():
        ids = prompts[name]
        final = events[rid][-1]
        ref = hf_logprobs(ids)
        assert [t.id for t in final.prompt_tokens] == ids
        assert final.prompt_tokens[0].logprob is None
        for p in range(1, len(ids)):
            expected = float(ref[p - 1, ids[p]])
            got = final.prompt_tokens[p].logprob
            worst = max(worst, abs(got - expected))
            assert abs(got - expected) < LOGPROB_TOL, (name, p, got, expected)
        assert final.num_prompt_tokens == len(ids)
    print(f"\nprompt logprobs {limits}: largest difference from transformers {worst:.2e}")
    assert_all_blocks_free(engine)


# -- cancellation and validation ------------------------------------------------------------------------


def test_abort_returns_every_block(make_engine, prompts, story_greedy):
    engine = make_engine(max_batch_prefill_tokens=16)
    total = engine.stats().num_total_blocks
    long_id = engine.add_request(prompts["long"], SamplingParams(max_new_tokens=200))
    story_id = engine.add_request(prompts["story"], SamplingParams(max_new_tokens=200))
    waiting_id = engine.add_request(prompts["code"], SamplingParams(max_new_tokens=200))
    engine.step()
    engine.step()  # "long" is half prefilled, the others wait
    assert engine.stats().num_free_blocks < total
    assert engine.abort(long_id) and engine.abort(waiting_id)
    assert not engine.abort(long_id)  # idempotent
    for _ in range(8):  # "story" prefills, then decodes a few tokens
        events = engine.step()
    assert [e.request_id for e in events] == [story_id]
    assert engine.abort(story_id)
    assert engine.step() == []
    assert_all_blocks_free(engine)
    assert engine.stats().num_free_blocks == total
    # the engine serves on normally after the cancellations
    [after] = engine.generate([prompts["story"]], SamplingParams(max_new_tokens=24, ignore_eos=True))
    assert after.token_ids == story_greedy[0]
    assert_all_blocks_free(engine)


def test_validation_errors(make_engine, prompts):
    engine = make_engine()
    max_input, max_total = engine.config.max_input_tokens, engine.config.max_total_tokens
    assert (max_input, max_total) == (1023, 1024)
    too_long = (prompts["long"] * 20)[: max_input + 1]
    with pytest.raises(ValidationError, match="must be <= 1023"):
        engine.add_request(too_long, SamplingParams(max_new_tokens=1))
    with pytest.raises(ValidationError, match="max_new_tokens"):
        engine.add_request(
            prompts["long"], SamplingParams(max_new_tokens=max_total - len(prompts["long"]) + 1)
        )
    with pytest.raises(ValidationError, match="empty"):
        engine.add_request([], SamplingParams())
    with pytest.raises(ValidationError, match="temperature"):
        engine.add_request(prompts["short"], SamplingParams(temperature=0.0))
    with pytest.raises(ValidationError, match="token ids"):
        engine.add_request([engine.model_info.vocab_size], SamplingParams())
    assert_all_blocks_free(engine)
    # the largest request that fits is accepted
    engine.add_request(prompts["long"], SamplingParams(max_new_tokens=max_total - len(prompts["long"])))
    engine.abort_all()
    assert_all_blocks_free(engine)


# -- text -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["japanese", "emoji"])
def test_streamed_text_is_valid_utf8(make_engine, prompts, tokenizer, name):
    from tgi.core.tokenization import apply_chat_template

    if name == "emoji":
        msgs = [{"role": "user", "content": "Reply with three emojis that describe happiness."}]
        ids = apply_chat_template(tokenizer, msgs)
    else:
        ids = prompts[name]
    engine = make_engine()
    [result] = engine.generate([ids], SamplingParams(max_new_tokens=24))
    streamed = "".join(e.text for e in result.events)
    assert streamed == result.generated_text == tokenizer.decode(result.token_ids, skip_special_tokens=True)
    assert "\ufffd" not in streamed
    assert any(ord(c) > 0x3000 for c in streamed), streamed  # CJK or emoji came out
    # some character spanned several tokens, and its first token's event carried no text
    assert any(e.text == "" and not e.special for e in result.events), streamed


# -- AsyncEngine ------------------------------------------------------------------------------------------


async def collect(engine: AsyncEngine, ids: list[int], params: SamplingParams) -> list[TokenEvent]:
    return [event async for event in engine.stream(ids, params)]


async def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_async_engine_streams(make_engine, prompts, story_greedy):
    llm = make_engine()
    chat_ref = llm.generate([prompts["chat"]], SamplingParams(max_new_tokens=16))[0]
    engine = AsyncEngine(llm)
    await engine.start()
    try:
        params = SamplingParams(max_new_tokens=24, ignore_eos=True)
        events = await collect(engine, prompts["story"], params)
        assert [e.token_id for e in events] == story_greedy[0]
        assert [e.index for e in events] == list(range(24))
        assert (
            events[-1].finish_reason == FinishReason.LENGTH and events[-1].generated_text == story_greedy[1]
        )
        # two streams at once
        story, chat = await asyncio.gather(
            collect(engine, prompts["story"], params),
            collect(engine, prompts["chat"], SamplingParams(max_new_tokens=16)),
        )
        assert [e.token_id for e in story] == story_greedy[0]
        assert [e.token_id for e in chat] == chat_ref.token_ids
        # validation errors are raised at once, before anything is queued
        with pytest.raises(ValidationError):
            engine.stream(prompts["short"], SamplingParams(max_new_tokens=2000))
        result = await engine.generate(prompts["chat"], SamplingParams(max_new_tokens=16))
        assert result.token_ids == chat_ref.token_ids and result.generated_text == chat_ref.generated_text
    finally:
        await engine.shutdown()
    assert not engine.healthy  # the thread has stopped
    with pytest.raises(EngineError):
        engine.stream(prompts["short"], SamplingParams())
    assert_all_blocks_free(llm)


async def test_async_engine_closing_a_stream_cancels_it(make_engine, prompts):
    llm = make_engine()
    total = llm.stats().num_total_blocks
    engine = AsyncEngine(llm)
    await engine.start()
    try:
        long = SamplingParams(max_new_tokens=500, ignore_eos=True)
        stream = engine.stream(prompts["long"], long)
        other = asyncio.ensure_future(collect(engine, prompts["story"], SamplingParams(max_new_tokens=8)))
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 3:
                break
        assert llm.stats().num_free_blocks < total
        await stream.aclose()
        assert len(await other) == 8  # the other request is not disturbed
        await wait_for(lambda: llm.stats().num_free_blocks == total and not llm.has_unfinished(), timeout=5)

        # shutdown(cancel_inflight=True) ends running streams with a cancelled event and frees their blocks
        stream = engine.stream(prompts["long"], long)
        first = await anext(stream)
        assert first.index == 0
        await engine.shutdown(cancel_inflight=True)
        rest = [e async for e in stream]
        assert rest and rest[-1].finish_reason == FinishReason.CANCELLED
    finally:
        await engine.shutdown()
    assert_all_blocks_free(llm)
