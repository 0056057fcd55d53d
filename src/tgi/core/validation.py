"""A request's one validation against the engine: defaults resolved, every limit and feature checked, TGI's
messages (no torch here).

Who checks what, once each:
- the server (`tgi.server.validation.fields`, `tgi.server.validation.sampling`, `tgi.server.validation.grammars`): the HTTP shape, i.e. field
  types, fields no API defines or this server does not serve, what an API words or bounds its own way
  (TGI's `top_p` < 1, `best_of`, `truncate`, OpenAI's `n`), its own settings (`--max-stop-sequences`...),
  and the grammar fields turned into a `Grammar`;
- this module: everything that needs the tokenized prompt, the engine's limits or its runner's features
  (`validate_request`, `check_runner_features`), so every message a client can get for them is written
  here (or, for the sampling ranges, in `SamplingParams.validate`);
- `LLMEngine.validate` calls both functions and compiles the grammar, once per request, into the
  `EngineRequest` the engine queues without checking it again. The server answers `ValidationError` with a
  422 (naming the grammar's field for `UnusableGrammarError`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tgi.core.request import ImageInput, UnusableGrammarError, ValidationError
from tgi.core.sampling_params import SamplingParams

if TYPE_CHECKING:
    from tgi.core.interfaces import ModelInfo, RunnerCapabilities, RunnerConstraints

#: each `SamplingParams` field's default (a field a backend cannot honour may only keep it)
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SamplingParams)}
#: the request's name of the fields it gives as text and the engine holds as token ids
_REQUEST_NAMES = {"bad_words_ids": "bad_words", "dry_sequence_breaker_ids": "dry_sequence_breakers"}

#: the 422 for a request with no input (the server also sends it for an empty text before tokenizing it)
EMPTY_INPUTS = "`inputs` cannot be empty"


@dataclass(frozen=True)
class RequestLimits:
    """The limits a request is checked against (the engine's, once derived at start-up)."""

    max_input_tokens: int
    max_total_tokens: int  # prompt + generated tokens
    vocab_size: int  # token ids must be in [0, vocab_size)
    lora_adapters: tuple[str, ...] = ()  # the adapter ids a request may name in `adapter_id`
    logits_processors: tuple[str, ...] = ()  # the processors a request may select (`--logits-processors`)


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
    check_token_lists(params, limits.vocab_size)
    check_logits_processors(params, limits.logits_processors)
    if params.adapter_id is not None and params.adapter_id not in limits.lora_adapters:
        loaded = ", ".join(limits.lora_adapters) or "none"
        raise ValidationError(f"adapter `{params.adapter_id}` is not loaded (loaded adapters: {loaded})")
    return params


def check_token_lists(params: SamplingParams, vocab_size: int) -> None:
    """`ValidationError` naming the field when a token id of `allowed_token_ids`, `bad_words` or the DRY
    sequence breakers is outside the vocabulary."""
    lists = (
        ("allowed_token_ids", [params.allowed_token_ids or ()]),
        ("bad_words", params.bad_words_ids),
        ("dry_sequence_breakers", params.dry_sequence_breaker_ids),
    )
    for name, sequences in lists:
        if any(not 0 <= t < vocab_size for seq in sequences for t in seq):
            raise ValidationError(f"`{name}` token ids must be in [0, {vocab_size})")


def check_logits_processors(params: SamplingParams, enabled: Sequence[str]) -> None:
    """`ValidationError` for a logits processor the operator did not enable (`--logits-processors`), or whose
    arguments it refuses (its `validate_args`' message)."""
    from tgi.core.plugins.logits_processors import logits_processors

    for choice in params.logits_processors:
        if choice.name not in enabled:
            names = ", ".join(enabled) or "none"
            raise ValidationError(
                f"`logits_processors`: {choice.name!r} is not enabled on this server (enabled: {names}; "
                "the operator enables processors with --logits-processors)"
            )
        try:
            logits_processors().get(choice.name).validate_args(choice.args)
        except ValueError as exc:
            raise ValidationError(f"`logits_processors`: {choice.name!r} {exc}") from None


def check_runner_features(params: SamplingParams, features: RunnerCapabilities, backend: str) -> None:
    """`ValidationError` naming the field when the request needs what the `backend`'s runner cannot do:
    prompt logprobs, grammar masks (`UnusableGrammarError`), or a sampling parameter its sampler does not
    honour (`RunnerCapabilities.unsupported_sampling`). Checked before `validate_request`: what the backend
    lacks is said whatever the prompt's length."""
    for name in sorted(features.unsupported_sampling):
        if getattr(params, name) != _DEFAULTS[name]:
            field = _REQUEST_NAMES.get(name, name)
            raise ValidationError(f"the {backend} backend's sampler does not support `{field}`")
    if params.prompt_logprobs and not features.prompt_logprobs:
        raise ValidationError(
            f"the {backend} backend cannot return prompt logprobs: `decoder_input_details` is not supported"
        )
    if params.prompt_top_n_tokens is not None and not features.prompt_top_logprobs:
        raise ValidationError(
            f"the {backend} backend cannot return the prompt tokens' ranks and alternatives: "
            "`prompt_logprobs` is not supported"
        )
    if params.grammar is not None:
        check_token_masks(features, backend)


def check_images(
    images: Sequence[ImageInput], features: RunnerCapabilities, backend: str, model: str
) -> None:
    """`ValidationError` when the request has images and the `backend`'s runner does not run a vision tower
    for this `model` (`RunnerCapabilities.image_inputs`): an image is refused by name, never dropped."""
    if images and not features.image_inputs:
        raise ValidationError(
            f"the model {model} on the {backend} backend does not take image inputs: "
            f"{len(images)} image(s) in the request"
        )


def check_image_spans(images: Sequence[ImageInput], num_prompt_tokens: int) -> None:
    """`ValidationError` unless every image's placeholder span lies inside the prompt, in prompt order,
    without overlapping another's."""
    end = 0
    for i, image in enumerate(images):
        if image.num_tokens < 1 or image.offset < end or image.offset + image.num_tokens > num_prompt_tokens:
            raise ValidationError(
                f"image {i}: its {image.num_tokens} placeholder tokens at offset {image.offset} do not lie "
                f"inside the {num_prompt_tokens}-token prompt after the previous image's"
            )
        end = image.offset + image.num_tokens


def check_image_budget(images: Sequence[ImageInput], max_encoder_tokens_per_step: int) -> None:
    """`ValidationError` naming `--max-encoder-tokens-per-step` when one image has more placeholder tokens
    than a step may start encoding: the scheduler could never start it."""
    for i, image in enumerate(images):
        if image.num_tokens > max_encoder_tokens_per_step:
            raise ValidationError(
                f"image {i} has {image.num_tokens} image tokens; --max-encoder-tokens-per-step allows "
                f"{max_encoder_tokens_per_step} per step"
            )


def check_atomic_images(images: Sequence[ImageInput], max_chunk_tokens: int | None) -> None:
    """`ValidationError` when an image has more placeholder tokens than the largest prefill chunk of a model
    that feeds each image in one chunk (`RunnerConstraints.atomic_images`; `max_chunk_tokens` None: images
    may be split across chunks): the scheduler could never feed it."""
    if max_chunk_tokens is None:
        return
    for i, image in enumerate(images):
        if image.num_tokens > max_chunk_tokens:
            raise ValidationError(
                f"image {i} has {image.num_tokens} image tokens; this model feeds an image in one prefill "
                f"chunk, and the largest is {max_chunk_tokens} tokens (--max-batch-prefill-tokens)"
            )


def check_token_masks(features: RunnerCapabilities, backend: str) -> None:
    """`UnusableGrammarError` when the `backend`'s runner applies no grammar masks."""
    if not features.token_masks:
        raise UnusableGrammarError(
            f"the {backend} backend cannot apply grammar masks: `grammar` (guided decoding) is not supported"
        )


def check_prediction(
    prediction: Sequence[int],
    features: RunnerCapabilities,
    constraints: RunnerConstraints,
    limits: RequestLimits,
    backend: str,
) -> None:
    """`ValidationError` naming `prediction` (OpenAI's Predicted Outputs, as token ids) when its ids are out of
    the vocabulary, it is longer than any sequence (`max_total_tokens`), or the `backend`'s runner cannot
    verify guesses: what `--speculate` needs (`tgi.core.engine_startup.choose_proposer`)."""
    if not prediction:
        return
    if len(prediction) > limits.max_total_tokens:
        raise ValidationError(
            f"`prediction` must have at most {limits.max_total_tokens} tokens (`max_total_tokens`). "
            f"Given: {len(prediction)}",
            param="prediction",
        )
    if any(not 0 <= t < limits.vocab_size for t in prediction):
        raise ValidationError(
            f"`prediction` token ids must be in [0, {limits.vocab_size})", param="prediction"
        )
    missing = [
        what
        for what, ok in (
            ("verification of several tokens per sequence", features.draft_verification),
            ("chunked prefill", constraints.chunked_prefill),
            ("mixed batches", constraints.mixed_batches),
        )
        if not ok
    ]
    if missing:
        raise ValidationError(
            f"`prediction` is verified as speculative decoding's guesses, and the {backend} backend's runner "
            f"lacks {', '.join(missing)}: send the request without it",
            param="prediction",
        )


#: what a pooling model of each kind (`PoolingSpec.kind`) makes, for refusing what it does not
POOLING_OUTPUTS = {"embed": "embeddings", "classify": "scores", "sparse": "sparse embeddings"}


def check_pooling(
    pooling: bool,
    info: ModelInfo,
    params: SamplingParams,
    token_embeddings: bool = False,
    capabilities: RunnerCapabilities | None = None,
    backend: str = "",
) -> None:
    """`ValidationError` for a request of the kind the model does not serve: a generation on a pooling model
    (embeddings only), a pooling request on a generative one, token embeddings (every token's hidden state)
    but of an embedder on a runner whose `capabilities` return them; a pooling request generates nothing
    (`max_new_tokens` 1: its prefill is its one step)."""
    if pooling and info.pooling is None:
        raise ValidationError(
            f"the model {info.architecture} generates text: it is not a pooling model (embeddings are served "
            "for models launched with --runner pooling or a sentence-transformers folder)"
        )
    if not pooling and info.pooling is not None:
        serves = POOLING_OUTPUTS[info.pooling.kind]
        raise ValidationError(
            f"the model {info.architecture} is a pooling model: it serves {serves}, not text generation"
        )
    if pooling and params.max_new_tokens != 1:
        raise ValueError("a pooling request is validated with SamplingParams(max_new_tokens=1)")
    if token_embeddings:
        check_token_embeddings(pooling, info, capabilities, backend)


def check_token_embeddings(
    pooling: bool, info: ModelInfo, capabilities: RunnerCapabilities | None, backend: str
) -> None:
    """`ValidationError` for a token-embeddings request that cannot be served: of a classifier, or on a
    runner that does not return them (`RunnerCapabilities.token_embeddings`)."""
    if not pooling:
        raise ValueError("token embeddings are asked of a pooling request")
    if info.pooling.kind != "embed":
        raise ValidationError(
            f"the model {info.architecture} serves {POOLING_OUTPUTS[info.pooling.kind]}, not token embeddings"
        )
    if capabilities is None or not capabilities.token_embeddings:
        raise ValidationError(
            f"the {backend or 'this'} backend's runner does not return token embeddings "
            "(RunnerCapabilities.token_embeddings)"
        )
