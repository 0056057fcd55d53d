"""TGI's `parameters` as `SamplingParams`, with the checks worded as TGI words them (its exclusive `top_p`
bound, `best_of`, `truncate`); the engine checks the rest once (`tgi.core.validation`)."""

from __future__ import annotations

from tgi.core.config import EngineConfig
from tgi.core.sampling_params import SamplingParams
from tgi.server.http.errors import validation_error
from tgi.server.service.settings import ServerSettings
from tgi.server.tgi.schemas import GenerateParameters
from tgi.server.validation.sampling import check_prompt_logprobs, check_stop, check_top_n


def tgi_sampling_params(p: GenerateParameters, settings: ServerSettings, stream: bool) -> SamplingParams:
    """TGI's parameters; the engine checks their ranges and the lengths (`tgi.core.validation`)."""
    # TGI samples as soon as any warper is set, even with do_sample=false.
    do_sample = bool(
        p.do_sample
        or (p.temperature is not None and p.temperature != 1.0)
        or (p.top_k is not None and p.top_k > 0)
        or (p.top_p is not None and p.top_p < 1.0)
        or (p.typical_p is not None and p.typical_p < 1.0)
    )
    best_of = p.best_of if p.best_of is not None else 1
    if not 0 < best_of <= settings.max_best_of:
        raise validation_error(f"`best_of` must be > 0 and <= {settings.max_best_of}. Given: {best_of}")
    if best_of > 1:
        if stream:
            raise validation_error("`best_of` != 1 is not supported when streaming tokens")
        if not do_sample:
            raise validation_error("you must use sampling when `best_of` is > 1")
        if p.seed is not None:
            raise validation_error("`seed` must not be set when `best_of` > 1")
    if stream and p.decoder_input_details:
        raise validation_error("`decoder_input_details` == true is not supported when streaming tokens")
    if p.decoder_input_details:
        check_prompt_logprobs("decoder_input_details", settings)
    if p.top_p is not None and not 0.0 < p.top_p < 1.0:
        # TGI's own bound on its routes (OpenAI routes accept 1.0, which means "off")
        raise validation_error("`top_p` must be > 0.0 and < 1.0")
    return SamplingParams(
        do_sample=do_sample,
        temperature=p.temperature if p.temperature is not None else 1.0,
        top_k=p.top_k if p.top_k is not None else 0,
        top_p=p.top_p if p.top_p is not None else 1.0,
        typical_p=p.typical_p if p.typical_p is not None else 1.0,
        repetition_penalty=p.repetition_penalty if p.repetition_penalty is not None else 1.0,
        frequency_penalty=p.frequency_penalty if p.frequency_penalty is not None else 0.0,
        seed=p.seed,
        max_new_tokens=p.max_new_tokens,  # None: the engine gives what is left of max_total_tokens
        stop=check_stop(p.stop, settings),
        include_stop_str_in_output=True,  # TGI's `generated_text` keeps the stop sequence it matched
        logprobs=p.details or stream or best_of > 1,  # TGI's stream events always carry a logprob
        top_n_tokens=check_top_n(p.top_n_tokens or 0, settings),
        prompt_logprobs=p.decoder_input_details,
        watermark=settings.watermark if p.watermark else None,  # the server's gamma and delta
    )


def check_truncate(truncate: int | None, config: EngineConfig) -> int | None:
    if truncate is not None and not 0 < truncate <= config.max_input_tokens:
        raise validation_error(
            f"`truncate` must be strictly positive and less than {config.max_input_tokens}. Given: {truncate}"
        )
    return truncate
