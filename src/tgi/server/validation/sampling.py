"""The checks of a request's sampling parameters that every API shares; each API's own parameters become
`SamplingParams` in its package (`tgi.server.tgi.parameters`, `tgi.server.openai.parameters`).

What is checked by the server: what only the server knows (its settings: `best_of`, stop sequences, top tokens), and
what an API words its own way (TGI's exclusive `top_p` bound, OpenAI's `max_tokens`, `n`). Everything else
(sampling ranges, lengths, token ids, what the backend can do, the grammar) the engine checks once, with
defaults resolved, when `InferenceService.generate` hands the request over (`LLMEngine.validate`, with every
check in `tgi.core.validation`); the server answers its `ValidationError` with the same 422.
"""

from __future__ import annotations

from tgi.core.sampling_params import (
    MAX_LOGIT_BIAS,
    MAX_STOP_SEQUENCE_CHARS,
    MAX_STOP_TOKEN_IDS,
    stop_too_long,
)
from tgi.server.http.errors import validation_error
from tgi.server.service.settings import ServerSettings


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


def check_priority(priority: int, settings: ServerSettings) -> int:
    """vLLM's `priority` (lower runs first; 0 by default) as the scheduler's (higher runs first): served
    with `--scheduling-policy priority`, refused by name otherwise (as vLLM refuses it under `fcfs`)."""
    if priority and settings.scheduling_policy != "priority":
        raise validation_error(
            "`priority` orders the queue only on a server started with --scheduling-policy priority",
            "priority",
        )
    return -priority


def truncated(ids: list[int], keep: int | None, field: str, max_input_tokens: int, images: bool) -> list[int]:
    """The prompt's last `keep` tokens (TGI's `truncate`, vLLM's `truncate_prompt_tokens`, where -1 keeps
    as many as an input may have); None keeps them all. A 422 names `field` when `keep` is out of range, or
    when cutting would cut into a prompt's images."""
    if keep is None:
        return ids
    if keep == -1 and field.endswith("truncate_prompt_tokens"):
        keep = max_input_tokens
    if not 0 < keep <= max_input_tokens:
        raise validation_error(
            f"`{field}` must be strictly positive and less than {max_input_tokens}. Given: {keep}", field
        )
    if images and keep < len(ids):
        raise validation_error(
            f"`{field}` ({keep}) would cut the images' tokens out of a {len(ids)}-token input: it cannot be "
            "used with images",
            field,
        )
    return ids[-keep:]
