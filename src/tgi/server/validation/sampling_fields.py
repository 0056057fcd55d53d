"""The sampling fields vLLM and llama.cpp add to OpenAI's requests, read as their peer reads them (a mixin of
the request models) and turned into `SamplingParams` fields (`sampling_fields`), the strings among them
tokenized off the event loop (`with_token_lists`, `tgi.core.sampling_tokens`).

- vLLM's: `min_p`, `bad_words`, `allowed_token_ids`, `logits_processors` (here: names of the processors the
  operator enabled with `--logits-processors`, each a string or `{"name": ..., "args": {...}}`);
- llama.cpp's: `typical_p`, `top_n_sigma` (a value <= 0 is off, as llama.cpp's default -1), DRY
  (`dry_multiplier`, `dry_base`, `dry_allowed_length`, `dry_penalty_last_n`, `dry_sequence_breakers`, whose
  default is llama.cpp's `["\\n", ":", "\\"", "*"]`) and XTC (`xtc_probability`, `xtc_threshold`).

Their ranges are the engine's to check (`SamplingParams.validate`, `tgi.core.validation`); what the server
checks here is what it must before tokenizing: how many strings, how long.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from tgi.core.sampling_params import (
    MAX_BAD_WORDS_IDS,
    MAX_STOP_SEQUENCE_CHARS,
    LogitsProcessorChoice,
    SamplingParams,
)
from tgi.core.sampling_tokens import DEFAULT_DRY_SEQUENCE_BREAKERS, bad_words_ids, dry_sequence_breaker_ids
from tgi.server.http.errors import validation_error
from tgi.server.validation.fields import RequestModel

if TYPE_CHECKING:
    from tgi.server.service.inference import InferenceService

#: the most `dry_sequence_breakers` strings a request may give (each is a scan of the vocabulary, once)
MAX_DRY_SEQUENCE_BREAKERS = 16


class LogitsProcessorField(RequestModel):
    """A logits processor selected with arguments."""

    name: str
    args: dict[str, Any] | None = None


class SamplingExtensions(RequestModel):
    """vLLM's and llama.cpp's sampling fields (None: the parameter's default)."""

    min_p: float | None = None
    typical_p: float | None = None
    top_n_sigma: float | None = None
    dry_multiplier: float | None = None
    dry_base: float | None = None
    dry_allowed_length: int | None = None
    dry_penalty_last_n: int | None = None
    dry_sequence_breakers: list[str] | None = None
    xtc_probability: float | None = None
    xtc_threshold: float | None = None
    bad_words: list[str] | None = None
    allowed_token_ids: list[int] | None = None
    logits_processors: list[str | LogitsProcessorField] | None = None


#: the fields that are `SamplingParams` fields of the same name and value
_AS_GIVEN = (
    "min_p", "typical_p", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
    "xtc_probability", "xtc_threshold",
)  # fmt: skip


def sampling_fields(req: SamplingExtensions) -> dict[str, Any]:
    """The `SamplingParams` fields `req` sets (the token lists of its strings come from `with_token_lists`)."""
    out = {name: getattr(req, name) for name in _AS_GIVEN if getattr(req, name) is not None}
    if req.top_n_sigma is not None:
        out["top_n_sigma"] = max(req.top_n_sigma, 0.0)  # llama.cpp: <= 0 is off (its default is -1)
    if req.allowed_token_ids is not None:
        out["allowed_token_ids"] = tuple(req.allowed_token_ids)
    if req.logits_processors:
        out["logits_processors"] = tuple(
            LogitsProcessorChoice(p)
            if isinstance(p, str)
            else LogitsProcessorChoice(p.name, dict(p.args or {}))
            for p in req.logits_processors
        )
    return out


def _check_strings(field: str, values: list[str] | None, limit: int) -> None:
    if values is None:
        return
    if len(values) > limit:
        raise validation_error(f"`{field}` may hold at most {limit} strings. Given: {len(values)}", field)
    if any(len(v) > MAX_STOP_SEQUENCE_CHARS for v in values):
        raise validation_error(
            f"`{field}` strings may be at most {MAX_STOP_SEQUENCE_CHARS} characters long", field
        )


async def with_token_lists(
    service: InferenceService, req: SamplingExtensions, params: SamplingParams
) -> SamplingParams:
    """`params` with `bad_words` (vLLM's tokenization) and DRY's sequence breakers (llama.cpp's, its default
    breakers when DRY is asked for without any) as token ids, tokenized on a worker thread with the
    tokenizer of the engine the request is on; a 422 names the field of a string that cannot be."""
    _check_strings("bad_words", req.bad_words, MAX_BAD_WORDS_IDS)
    _check_strings("dry_sequence_breakers", req.dry_sequence_breakers, MAX_DRY_SEQUENCE_BREAKERS)
    breakers = req.dry_sequence_breakers
    if breakers is None and params.dry_multiplier > 0:
        breakers = list(DEFAULT_DRY_SEQUENCE_BREAKERS)
    if not req.bad_words and not breakers:
        return params
    tokenizer = service.engine.tokenizer  # in the request's context: the engine it was admitted on

    def tokenize() -> SamplingParams:
        try:
            return dataclasses.replace(
                params,
                bad_words_ids=bad_words_ids(tokenizer, req.bad_words or ()),
                dry_sequence_breaker_ids=dry_sequence_breaker_ids(tokenizer, breakers or ()),
            )
        except ValueError as exc:  # the message names the field
            raise validation_error(str(exc)) from None

    return await asyncio.to_thread(tokenize)
