"""OpenAI's sampling fields (and vLLM's and llama.cpp's extensions to them) as `SamplingParams`: temperature 0 is greedy,
`max_tokens` and `n` checked as OpenAI words them; the engine checks the rest once (`tgi.core.validation`)."""

from __future__ import annotations

from tgi.core.sampling_params import SamplingParams
from tgi.server.http.errors import validation_error
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
