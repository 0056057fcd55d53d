"""OpenAI's sampling fields (and vLLM's and llama.cpp's extensions to them) as `SamplingParams`: temperature 0 is greedy,
`max_tokens` and `n` checked as OpenAI words them; the engine checks the rest once (`tgi.core.validation`)."""

from __future__ import annotations

from dataclasses import fields

from tgi.core.sampling_params import SamplingParams
from tgi.server.http.errors import validation_error
from tgi.server.service.beam_search import BeamSearch
from tgi.server.service.settings import ServerSettings
from tgi.server.validation.sampling import check_priority, check_stop, check_top_n, logit_bias, stop_token_ids
from tgi.server.validation.sampling_fields import sampling_fields


def openai_sampling_params(req, settings: ServerSettings, top_n: int, logprobs: bool) -> SamplingParams:
    """OpenAI's parameters: temperature 0 is greedy; otherwise sampling (temperature 1 by default)."""
    if req.n < 1:
        raise validation_error(f"`n` must be >= 1. Given: {req.n}", "n")
    if req.max_new_tokens is not None and req.max_new_tokens < 1:  # OpenAI's name for the field
        raise validation_error("`max_tokens` must be strictly positive")
    greedy = req.temperature is not None and req.temperature == 0
    return SamplingParams(
        do_sample=not greedy,
        temperature=1.0 if greedy or req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=req.top_k or 0,
        repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
        frequency_penalty=req.frequency_penalty or 0.0,
        presence_penalty=req.presence_penalty or 0.0,
        seed=req.seed,
        max_new_tokens=req.max_new_tokens,  # None: the engine gives what is left of max_total_tokens
        min_new_tokens=req.min_tokens or 0,
        stop=check_stop(req.stop_list, settings),
        stop_token_ids=stop_token_ids(req.stop_token_ids),
        include_stop_str_in_output=req.include_stop_str_in_output,
        ignore_eos=req.ignore_eos,
        logprobs=logprobs,
        top_n_tokens=check_top_n(top_n, settings),
        logit_bias=logit_bias(req.logit_bias),
        skip_special_tokens=req.skip_special_tokens,
        spaces_between_special_tokens=req.spaces_between_special_tokens,
        priority=check_priority(req.priority, settings),
        **sampling_fields(req),  # vLLM's and llama.cpp's (their strings: `with_token_lists`)
    )


#: what a beam search takes from the request's sampling parameters: its lengths, its ending tokens, how its
#: text is shown, its priority and adapter; every other parameter shapes a sampled token, which no beam is
_BEAM_FIELDS = {
    "max_new_tokens", "min_new_tokens", "stop_token_ids", "ignore_eos", "include_stop_str_in_output",
    "skip_special_tokens", "spaces_between_special_tokens", "priority", "adapter_id", "do_sample",
    "temperature", "extra",
}  # fmt: skip


#: the request field a sampling parameter comes from, where the names differ
_REQUEST_FIELD = {
    "bad_words_ids": "bad_words", "dry_sequence_breaker_ids": "dry_sequence_breakers", "top_n_tokens": "logprobs",
    "prompt_top_n_tokens": "prompt_logprobs",
}  # fmt: skip


def beam_search_of(
    req, params: SamplingParams, grammar_field: str | None, stream: bool, prediction: bool
) -> BeamSearch | None:
    """vLLM's `use_beam_search` with its `n` beams and `length_penalty`, or None. Refused by name beside
    what would change nothing in the search (vLLM's beams are scored on the model's own log-probabilities:
    no temperature but 0 or the default, no sampler, penalty, bias, grammar, stop string, logprobs, seed),
    streamed, or with a prediction; `length_penalty` without it, by name too."""
    length_penalty = 1.0 if req.length_penalty is None else req.length_penalty
    if not req.use_beam_search:
        if length_penalty != 1.0:
            raise validation_error(
                "`length_penalty` applies to beam search only (`use_beam_search`)", "length_penalty"
            )
        return None
    if stream:
        raise validation_error("`stream` cannot be combined with `use_beam_search`", "stream")
    if prediction:
        raise validation_error("`prediction` cannot be combined with `use_beam_search`", "prediction")
    if req.temperature not in (None, 0):
        raise validation_error(
            "`temperature` cannot be combined with `use_beam_search` (0 or unset)", "temperature"
        )
    default = SamplingParams()
    for f in fields(SamplingParams):
        if f.name not in _BEAM_FIELDS and getattr(params, f.name) != getattr(default, f.name):
            name = grammar_field if f.name == "grammar" else _REQUEST_FIELD.get(f.name, f.name)
            raise validation_error(f"`{name}` cannot be combined with `use_beam_search`", name)
    return BeamSearch(req.n, length_penalty)
