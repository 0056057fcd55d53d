"""Beam search over the engine, as vLLM serves `use_beam_search`: a search the server drives one token at a
time, each live beam a one-token request whose `2 * width` most likely next tokens (log-softmax of the raw
logits) extend it; the prefix cache makes each step's requests prefill only what the last step added.

Semantics (vLLM's `beam_search`, read for its definitions): a beam's score is its summed log-probability over
`len(prompt + output) ** length_penalty`, not counting a final end-of-sequence token; each step keeps the
`width` best extensions that did not end, and the ones that end (an EOS token unless `ignore_eos`, a stop
token id) are set aside as finished; after `max_new_tokens` steps, or once no beam is left, the `width` best
of the finished and the live beams are the answer, best first. The tokens of each come back as the events a
sampled sequence's would (text from the request's own detokenizer), so every route formats them as it does
any generation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tgi.core.detokenizer import IncrementalDetokenizer
from tgi.core.request import EngineRequest, FinishReason, TokenEvent
from tgi.core.sampling_params import SamplingParams

if TYPE_CHECKING:
    from tgi.server.service.generation import SequenceInput
    from tgi.server.service.protocol import ServingEngine


@dataclass(frozen=True)
class BeamSearch:
    """A request's beam search: `width` beams kept per step (OpenAI's `n`: as many answers come back) and
    vLLM's `length_penalty` (the exponent of the length a beam's log-probability is divided by)."""

    width: int
    length_penalty: float = 1.0


@dataclass(frozen=True)
class _Beam:
    tokens: tuple[int, ...]  # generated, not the prompt
    logprobs: tuple[float, ...]
    ended: bool = False  # its last token is an end-of-sequence or stop token

    @property
    def cum_logprob(self) -> float:
        return sum(self.logprobs)


def score(beam: _Beam, prompt_len: int, length_penalty: float) -> float:
    """vLLM's beam score: the summed log-probability over the sequence's length (its prompt's tokens with its
    output's, without a final end-of-sequence token) to the power `length_penalty`."""
    length = prompt_len + len(beam.tokens) - (1 if beam.ended else 0)
    return beam.cum_logprob / (max(length, 1) ** length_penalty)


async def searched(
    given: list[SequenceInput],
    requests: list[EngineRequest],
    owners: list[int],
    events: Callable[[EngineRequest, SamplingParams], AsyncIterator[TokenEvent]],
    engine: ServingEngine,
) -> list[list[TokenEvent]]:
    """Each input's beam search, its `n` best beams in the places of its `n` sequences (`owners`: the input of
    each); each step's requests run as any engine request of the service does (`events`: its stream)."""
    ends = engine.eos_token_ids
    results: list[list[TokenEvent]] = []
    for i, x in enumerate(given):
        stream = lambda r, p=x.params: events(r, p)  # noqa: E731
        results += await beam_search(requests[owners.index(i)], x.beam, stream, engine.tokenizer, ends)
    return results


async def beam_search(
    request: EngineRequest,
    search: BeamSearch,
    stream: Callable[[EngineRequest], AsyncIterator[TokenEvent]],
    tokenizer,
    end_ids: Collection[int],
) -> list[list[TokenEvent]]:
    """The `search.width` best beams of `request` (validated: its `max_new_tokens` resolved), each as its list
    of events, best first. `stream(request)` runs one engine request (the service's path: admission was the
    caller's, metrics and traces are the stream's); `end_ids` are the tokens that end a sequence."""
    params = request.params
    prompt = list(request.prompt_token_ids)
    ends = set(params.stop_token_ids or ()) | (set() if params.ignore_eos else set(end_ids))
    step_params = replace(
        params,
        max_new_tokens=1,
        min_new_tokens=0,
        ignore_eos=True,
        top_n_tokens=2 * search.width,
        logprobs=True,
    )
    live, finished = [_Beam((), ())], []
    cached = 0
    key = lambda b: score(b, len(prompt), search.length_penalty)  # noqa: E731
    for step in range(params.max_new_tokens):
        steps = [replace(request, prompt_token_ids=(*prompt, *b.tokens), params=step_params) for b in live]
        finals = await asyncio.gather(*(_last_event(stream(r)) for r in steps))
        cached = cached or finals[0].num_cached_tokens
        candidates = []
        for beam, final in zip(live, finals, strict=True):
            for top in final.top_tokens:
                ended = top.id in ends
                if ended and step < params.min_new_tokens:
                    continue  # too early to end
                candidates.append(_Beam((*beam.tokens, top.id), (*beam.logprobs, top.logprob), ended))
        finished += [c for c in candidates if c.ended]
        live = sorted((c for c in candidates if not c.ended), key=key, reverse=True)[: search.width]
        if not live:
            break
    best = sorted(finished + live, key=key, reverse=True)[: search.width]
    return [_events(b, request, tokenizer, cached) for b in best]


async def _last_event(events: AsyncIterator[TokenEvent]) -> TokenEvent:
    last = None
    try:
        async for event in events:
            last = event
    finally:
        await events.aclose()
    assert last is not None and last.finish_reason is not None, "a one-token request ended without its token"
    return last


def _events(beam: _Beam, request: EngineRequest, tokenizer, cached: int) -> list[TokenEvent]:
    """The beam's tokens as a sequence's events: each token's text from the request's own detokenizer (an
    ending token shows no text, as a sampled sequence's does), the last with the finish reason and totals."""
    params = request.params
    detok = IncrementalDetokenizer(
        tokenizer, request.prompt_token_ids, params.skip_special_tokens, params.spaces_between_special_tokens
    )
    special = frozenset(tokenizer.all_special_ids)
    events = []
    for i, (token, logprob) in enumerate(zip(beam.tokens, beam.logprobs, strict=True)):
        last = i == len(beam.tokens) - 1
        ending = last and beam.ended
        text = "" if ending and not params.include_stop_str_in_output else detok.add(token)
        if last:
            text += detok.flush()
        events.append(
            TokenEvent(
                "beam", i, token, detok.token_text(token), text, logprob, token in special,
                finish_reason=(FinishReason.EOS if ending else FinishReason.LENGTH) if last else None,
                generated_text=detok.text if last else None,
                num_prompt_tokens=len(request.prompt_token_ids) if last else 0,
                num_cached_tokens=cached if last else 0,
            )
        )  # fmt: skip
    return events
