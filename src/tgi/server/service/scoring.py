"""The one path of a classifier's scores, for every API that serves them (TEI's `/rerank` and `/predict`,
vLLM's, Jina's and Cohere's `/v1/rerank`, `/rerank`, `/v2/rerank`, vLLM's `/score` and `/classify`): each
input (a text, or a pair of texts as BERT's tokenizer makes it) tokenized and checked against the limits
here, then pooled by the engine on the embeddings' path (`tgi.server.service.pooling.embed`, `kind`
"classify"), whose pooled output is the classifier head's logits; the activations that make them scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tgi.core.interfaces.pooling import PoolingSpec
from tgi.core.loading.pooling_config import SEGMENT_CLASSIFIERS
from tgi.core.validation import too_many_input_tokens
from tgi.server.http.errors import validation_error
from tgi.server.service.pooling import EmbedRequest, pooling_spec

if TYPE_CHECKING:
    from starlette.requests import Request

    from tgi.server.service.inference import InferenceService


@dataclass(frozen=True)
class ScoreInput:
    """One input of a classifier: `texts` (one text, or a pair: a query and a document), and the request
    field its last text came from (`texts[2]`), named by its refusals."""

    texts: tuple[str, ...]
    field: str
    first_field: str | None = None  # the field of the first text of a pair (`query`), where it differs


@dataclass(frozen=True)
class Scored:
    logits: list[float]  # one per label (`PoolingSpec.labels`)
    num_prompt_tokens: int


def classifier(service: InferenceService, one_label: str | None = None) -> PoolingSpec:
    """The served classifier's spec, or a 422 saying what the model serves; `one_label`: the route (a
    reranker's or a scorer's), refused by a 422 on a model of more than one label."""
    spec = pooling_spec(service, "classify")
    if one_label is not None and spec.dimension != 1:
        raise validation_error(
            f"the model {service.model_name} classifies into {spec.dimension} labels "
            f"({', '.join(spec.labels)}): it serves POST /predict and /classify, not {one_label}, which "
            "needs a model of one label (a cross-encoder)"
        )
    return spec


def activated(spec: PoolingSpec, logit: float) -> float:
    """One label's logit made a score by the model's activation (sentence-transformers' `CrossEncoder`)."""
    return 1 / (1 + math.exp(-logit)) if spec.activation == "sigmoid" else logit


def probabilities(logits: Sequence[float]) -> list[float]:
    """A classifier's probabilities: the softmax of its logits, or the sigmoid of its one logit."""
    if len(logits) == 1:
        return [1 / (1 + math.exp(-logits[0]))]
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]


def _param(field: str) -> str:
    """The request field an error names as its `param`: `texts` for `texts[2]`."""
    return field.split("[")[0]


def encoded(tokenizer, x: ScoreInput, limit: int, truncate: str | None) -> list[int]:
    """`x`'s tokens as the tokenizer makes a text or a pair; one too long cut at its last text's end
    ("right") or start ("left") where asked, else a 422 naming its field."""
    ids = tokenizer(*x.texts)["input_ids"]
    if len(ids) <= limit:
        return ids
    if truncate is None:
        raise validation_error(f"{too_many_input_tokens(len(ids), limit)} in `{x.field}`", _param(x.field))
    last = x.texts[-1]
    offsets = tokenizer(last, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    drop = len(ids) - limit
    while len(ids) > limit:  # re-tokenizing the cut text may give a token or two more: cut again
        keep = len(offsets) - drop
        if keep <= 0:
            where = x.first_field or x.field
            raise validation_error(
                f"`{where}` alone is too long for {limit} tokens, even truncated", _param(where)
            )
        cut = last[: offsets[keep - 1][1]] if truncate == "right" else last[offsets[len(offsets) - keep][0] :]
        ids = tokenizer(*x.texts[:-1], cut)["input_ids"]
        drop += max(0, len(ids) - limit)
    return ids


def reads_segments(architecture: str) -> bool:
    """Whether the served classifier (`ModelInfo.architecture`, maybe with its implementation note) reads a
    pair's segments from its separators (BERT's), so that `checked_segments` applies; XLM-RoBERTa's does
    not (one token type)."""
    return architecture.split(" ", 1)[0] in SEGMENT_CLASSIFIERS


def checked_segments(ids: list[int], x: ScoreInput) -> None:
    """BERT's template ends a text and a pair's each text with its separator, from which the model reads the
    segments (`tgi.core.models.bert`): a text that holds the separator itself is refused, naming its field."""
    if ids.count(ids[-1]) != len(x.texts):
        raise validation_error(
            f"`{x.field}` holds the model's separator token (id {ids[-1]}): its segments could not be told "
            "apart",
            _param(x.field),
        )


async def score(
    service: InferenceService,
    http: Request,
    tracker,
    inputs: Sequence[ScoreInput],
    truncate: str | None,
    field: str,
) -> list[Scored]:
    """Each input's logits from the classifier (in input order); `tracker` finishes here, with the error
    where one comes. `field`: the request's field of the inputs."""
    try:
        tokenizer, limit = service.engine.tokenizer, service.engine.config.max_input_tokens

        def encode_all() -> list[list[int]]:
            return [encoded(tokenizer, x, limit, truncate) for x in inputs]

        ids = await service._tokenizing(encode_all)
        if reads_segments(service.engine.model_info.architecture):
            for tokens, x in zip(ids, inputs, strict=True):
                checked_segments(tokens, x)
    except BaseException as exc:
        tracker.finish(exc)
        raise
    pooled = await service.embed(http, tracker, EmbedRequest(ids, field, normalize=False, kind="classify"))
    return [Scored(p.vector, p.num_prompt_tokens) for p in pooled]
