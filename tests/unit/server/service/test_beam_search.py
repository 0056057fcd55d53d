"""Beam search over a scripted model (each step's top tokens given by a table on the last token): the
search keeps the best `width` beams by vLLM's score, sets aside the ones that end, answers best first, and
gives each beam's tokens back as a sequence's events with its text."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import pytest

from tgi.core.loading import resolve_model
from tgi.core.request import EngineRequest, FinishReason, TokenEvent, TopToken
from tgi.core.sampling_params import SamplingParams
from tgi.core.tokenization import load_tokenizer
from tgi.server.service.beam_search import BeamSearch, beam_search, score


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(resolve_model(None))


@pytest.fixture(scope="module")
def words(tokenizer) -> dict[str, int]:
    """One token id per word (each word is one token of the default model's vocabulary)."""
    ids = {
        w: tokenizer.encode(" " + w, add_special_tokens=False) for w in ("the", "cat", "dog", "sat", "ran")
    }
    assert all(len(v) == 1 for v in ids.values()), ids
    return {w: v[0] for w, v in ids.items()}


END = 2  # the default model's <|im_end|>


def scripted(table: dict[int | None, dict[int, float]]):
    """A `stream` whose one-token requests answer the table's next tokens (by probability) for the prompt's
    last token (None: the first step's, after the prompt), the top `top_n_tokens` of them as `top_tokens`;
    and the prompts it was asked."""
    asked: list[tuple[int, ...]] = []

    async def stream(request: EngineRequest) -> AsyncIterator[TokenEvent]:
        asked.append(request.prompt_token_ids)
        assert request.params.max_new_tokens == 1 and not request.params.do_sample
        last = request.prompt_token_ids[-1] if len(request.prompt_token_ids) > 1 else None
        nexts = sorted(table[last].items(), key=lambda kv: -kv[1])[: request.params.top_n_tokens]
        tops = tuple(TopToken(t, "", math.log(p), False) for t, p in nexts)
        yield TokenEvent("r", 0, tops[0].id, "", "", tops[0].logprob, False, tops, FinishReason.LENGTH)

    return stream, asked


def _request(params: SamplingParams) -> EngineRequest:
    return EngineRequest((7,), params)  # a one-token prompt: its token (7) is not in any table


async def _search(table, width, words, tokenizer, **params):
    stream, asked = scripted(table)
    params = SamplingParams(**{"max_new_tokens": 3, **params})
    beams = await beam_search(_request(params), BeamSearch(width), stream, tokenizer, {END})
    return beams, asked


def _tokens(beams) -> list[list[int]]:
    return [[e.token_id for e in events] for events in beams]


@pytest.mark.asyncio
async def test_a_wider_beam_finds_the_likelier_sequence_that_greedy_misses(words, tokenizer):
    the, cat, dog, sat, ran = (words[w] for w in ("the", "cat", "dog", "sat", "ran"))
    # greedy takes "the" (0.6), then at best 0.3; "cat" (0.4) leads to "sat" at 0.9: 0.36 > 0.18
    table = {
        None: {the: 0.6, cat: 0.4},
        the: {dog: 0.3, ran: 0.3, sat: 0.2, cat: 0.2},
        cat: {sat: 0.9, ran: 0.1},
        dog: {ran: 1.0},
        ran: {sat: 1.0},
        sat: {ran: 1.0},
    }
    greedy, _ = await _search(table, 1, words, tokenizer, max_new_tokens=2)
    assert _tokens(greedy) == [[the, dog]]  # the first of the tied 0.3s, as the sort keeps the table's order
    beams, asked = await _search(table, 2, words, tokenizer, max_new_tokens=2)
    assert _tokens(beams)[0] == [cat, sat] and len(beams) == 2
    assert (7,) in asked and (7, cat) in asked and (7, the) in asked  # each live beam asked once per step
    best = beams[0]
    assert [e.finish_reason for e in best] == [None, FinishReason.LENGTH]
    assert best[-1].generated_text == tokenizer.decode([cat, sat]) == "".join(e.text for e in best)
    assert best[-1].num_prompt_tokens == 1
    assert math.isclose(sum(e.logprob for e in best), math.log(0.36))


@pytest.mark.asyncio
async def test_a_beam_that_ends_is_set_aside_and_its_end_token_shows_no_text(words, tokenizer):
    the, cat = words["the"], words["cat"]
    table = {None: {the: 0.5, END: 0.5}, the: {cat: 0.2, END: 0.8}, cat: {END: 1.0}}
    beams, _ = await _search(table, 2, words, tokenizer, max_new_tokens=4)
    ends = [b for b in beams if b[-1].finish_reason is FinishReason.EOS]
    assert ends and all(b[-1].token_id == END and b[-1].text == "" for b in ends)
    scores = [score_of(b, 1) for b in beams]
    assert scores == sorted(scores, reverse=True)  # best first


def score_of(events, prompt_len: int, length_penalty: float = 1.0) -> float:
    return sum(e.logprob for e in events) / (
        (prompt_len + len(events) - (events[-1].finish_reason is FinishReason.EOS)) ** length_penalty
    )


@pytest.mark.asyncio
async def test_no_beam_ends_before_min_new_tokens(words, tokenizer):
    the = words["the"]
    table = {None: {END: 0.9, the: 0.1}, the: {END: 0.9, the: 0.1}}
    beams, _ = await _search(table, 1, words, tokenizer, max_new_tokens=3, min_new_tokens=2)
    assert _tokens(beams) == [[the, the, END]]


@pytest.mark.asyncio
async def test_ignore_eos_keeps_an_end_token_as_a_token(words, tokenizer):
    table = {None: {END: 0.9, words["the"]: 0.1}, END: {END: 1.0}}
    beams, _ = await _search(table, 1, words, tokenizer, max_new_tokens=2, ignore_eos=True)
    assert _tokens(beams) == [[END, END]] and beams[0][-1].finish_reason is FinishReason.LENGTH


def test_the_score_divides_by_the_length_with_the_prompt_and_without_the_end():
    from tgi.server.service.beam_search import _Beam

    ended = _Beam((5, END), (-1.0, -1.0), ended=True)
    assert score(ended, 3, 1.0) == -2.0 / 4  # 3 prompt tokens + 1 (the end not counted)
    assert score(ended, 3, 0.0) == -2.0
    assert score(_Beam((5, 6), (-1.0, -1.0)), 3, 2.0) == -2.0 / 25
