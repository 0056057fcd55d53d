"""A request's one validation: defaults resolved, every limit checked, TGI's messages (no torch here).

The server parses a request into token ids and `SamplingParams` and checks only what belongs to its API
(a field's name or bound there, `best_of`, `truncate`, the number of stop sequences); the engine calls
`validate_request` once, before the request is queued, and the server answers its `ValidationError` with a
422. Every message a client can get for the limits and the sampling ranges is written here (or, for the
ranges, in `SamplingParams.validate`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from tgi.core.request import ValidationError
from tgi.core.sampling_params import SamplingParams

#: the 422 for a request with no input (the server also sends it for an empty text before tokenizing it)
EMPTY_INPUTS = "`inputs` cannot be empty"


@dataclass(frozen=True)
class RequestLimits:
    """The limits a request is checked against (the engine's, once derived at start-up)."""

    max_input_tokens: int
    max_total_tokens: int  # prompt + generated tokens
    vocab_size: int  # token ids must be in [0, vocab_size)
    lora_adapters: tuple[str, ...] = ()  # the adapter ids a request may name in `adapter_id`


def too_many_input_tokens(given: int, max_input_tokens: int) -> str:
    """The message for an input of `given` tokens past `--max-input-tokens`: TGI's words, then the bound
    they mean (it is inclusive)."""
    return (
        f"`inputs` must have less than {max_input_tokens} tokens. Given: {given} "
        f"(`inputs` tokens must be <= {max_input_tokens})"
    )


def validate_request(
    prompt_token_ids: Sequence[int], params: SamplingParams, limits: RequestLimits
) -> SamplingParams:
    """`params` with its defaults resolved (`max_new_tokens=None`: what is left of `max_total_tokens`, at
    least 1), or `ValidationError` with TGI's message. The order is TGI's: sampling ranges, an empty input,
    then the lengths; when both length limits are broken the message names both, the total first."""
    n = len(prompt_token_ids)
    if params.max_new_tokens is None:
        params = dataclasses.replace(params, max_new_tokens=max(limits.max_total_tokens - n, 1))
    try:
        params.validate()
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    if n == 0:
        raise ValidationError(EMPTY_INPUTS)
    broken = []
    if n + params.max_new_tokens > limits.max_total_tokens:
        broken.append(
            f"`inputs` tokens + `max_new_tokens` must be <= {limits.max_total_tokens}. "
            f"Given: {n} `inputs` tokens and {params.max_new_tokens} `max_new_tokens`"
        )
    if n > limits.max_input_tokens:
        broken.append(too_many_input_tokens(n, limits.max_input_tokens))
    if broken:
        raise ValidationError("; ".join(broken))
    if any(not 0 <= t < limits.vocab_size for t in prompt_token_ids):
        raise ValidationError(f"token ids must be in [0, {limits.vocab_size})")
    if any(not 0 <= t < limits.vocab_size for t, _ in params.logit_bias):
        raise ValidationError(f"`logit_bias` token ids must be in [0, {limits.vocab_size})")
    if any(not 0 <= t < limits.vocab_size for t in params.stop_token_ids):
        raise ValidationError(f"`stop_token_ids` must be in [0, {limits.vocab_size})")
    if params.adapter_id is not None and params.adapter_id not in limits.lora_adapters:
        loaded = ", ".join(limits.lora_adapters) or "none"
        raise ValidationError(f"adapter `{params.adapter_id}` is not loaded (loaded adapters: {loaded})")
    return params
