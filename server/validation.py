"""Parse a request's parameters into `SamplingParams`, with the checks that belong to its API.

What is checked here: what only the server knows (its settings: `best_of`, stop sequences, top tokens), and
what an API words its own way (TGI's exclusive `top_p` bound, OpenAI's `max_tokens`, `n`). Everything else
(sampling ranges, lengths, token ids, what the backend can do, the grammar) the engine checks once, with
defaults resolved, when `InferenceService.generate` hands the request over (`LLMEngine.validate`, with every
check in `tgi.core.validation`); the server answers its `ValidationError` with the same 422.
"""

from __future__ import annotations

from tgi.core.config import EngineConfig
from tgi.core.sampling_params import (
    MAX_LOGIT_BIAS,
    MAX_STOP_SEQUENCE_CHARS,
    MAX_STOP_TOKEN_IDS,
    SamplingParams,
    stop_too_long,
)
from tgi.server.errors import validation_error
from tgi.server.schemas_tgi import GenerateParameters
from tgi.server.settings import ServerSettings


def check_stop(stop: list[str], settings: ServerSettings) -> tuple[str, ...]:
    if len(stop) > settings.max_stop_sequences:
        raise validation_error(
            f"`stop` supports up to {settings.max_stop_sequences} stop sequences. Given: {len(stop)}"
        )
    if any(len(s) > MAX_STOP_SEQUENCE_CHARS for s in stop):  # at once: before the prompt is tokenized
        raise validation_error(stop_too_long(max(len(s) for s in stop)))
    return tuple(stop)


def check_top_n(top_n: int, settings: ServerSettings) -> int:
    if not 0 <= top_n <= settings.max_top_n_tokens:
        raise validation_error(
            f"`top_n_tokens` must be >= 0 and <= {settings.max_top_n_tokens}. Given: {top_n}"
        )
    return top_n


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


def check_prompt_logprobs(field: str, settings: ServerSettings) -> None:
    """Prompt logprobs cost a [prompt, vocabulary] logits tensor: as TGI, only a server started with
    `--enable-prefill-logprobs` computes them; otherwise the field asking for them is refused by name."""
    if not settings.enable_prefill_logprobs:
        raise validation_error(
            f"`{field}` asks for the logprobs of the prompt tokens, which this server computes only when "
            "started with --enable-prefill-logprobs",
            field,
        )


def logit_bias(bias: dict[str, float] | None) -> tuple[tuple[int, float], ...]:
    """OpenAI's `logit_bias` (token ids as strings) as sorted (token id, bias) pairs, at most
    `MAX_LOGIT_BIAS` of them (a 422 at once, before anything is tokenized); the engine checks the ids
    against the vocabulary and the biases' range."""
    if bias and len(bias) > MAX_LOGIT_BIAS:
        raise validation_error(
            f"`logit_bias` may name at most {MAX_LOGIT_BIAS} tokens. Given: {len(bias)}", "logit_bias"
        )
    pairs = []
    for key, value in (bias or {}).items():
        try:
            token = int(key)
        except ValueError:
            raise validation_error(
                f"`logit_bias` keys must be token ids, got {key!r}", "logit_bias"
            ) from None
        pairs.append((token, float(value)))
    return tuple(sorted(pairs))


def stop_token_ids(ids: list[int] | None) -> tuple[int, ...]:
    """vLLM's `stop_token_ids`, at most `MAX_STOP_TOKEN_IDS` of them (a 422 at once); the engine checks
    them against the vocabulary."""
    if ids and len(ids) > MAX_STOP_TOKEN_IDS:
        raise validation_error(
            f"`stop_token_ids` may hold at most {MAX_STOP_TOKEN_IDS} token ids. Given: {len(ids)}",
            "stop_token_ids",
        )
    return tuple(ids or ())


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
    )
