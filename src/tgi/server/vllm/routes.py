"""vLLM's scoring routes over the service's one scoring path (`tgi.server.service.scoring`): rerank in the
shape Jina's and Cohere's APIs share (`query`, `documents`, `top_n`, `return_documents`; `results` of
`{index, relevance_score, document}` best first), `/score` (`text_1` against `text_2`: one against one, one
against many, or pairwise) and `/classify` (`input`: each text's label and probabilities)."""

from __future__ import annotations

import time
import uuid
from typing import ClassVar

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from tgi.server.http.errors import OpenAIErrorResponse, validation_error
from tgi.server.lora.adapters import openai_adapter
from tgi.server.service.inference import InferenceService
from tgi.server.service.scoring import Scored, ScoreInput, activated, classifier, probabilities, score
from tgi.server.validation.fields import NEUTRAL, RequestModel, check_fields

router = APIRouter(tags=["vLLM scoring"])
_ERRORS = {code: {"model": OpenAIErrorResponse} for code in (404, 422, 429, 500)}
# the fields vLLM, Jina and Cohere define that are not served here: refused by name unless neutral
_KNOWN = {
    "truncate_prompt_tokens": NEUTRAL,
    "priority": (None, 0),
    "request_id": NEUTRAL,
    "max_tokens_per_doc": NEUTRAL,
    "rank_fields": NEUTRAL,
    "activation": (None, True),
    "use_activation": (None, True),
    "softmax": (None, True),
    "mm_processor_kwargs": NEUTRAL,
}


class Document(BaseModel):
    """A document as Jina and Cohere also send it: `{"text": ...}`."""

    model_config = ConfigDict(strict=True, extra="forbid")
    text: str


class RerankRequest(RequestModel):
    """A rerank request: `query` and its `documents` (texts or `{"text"}` objects); `top_n` the best
    `top_n` only (0 or absent: all); `return_documents` each document in its result (default true)."""

    KNOWN: ClassVar = _KNOWN
    query: str
    documents: list[str | Document]
    model: str | None = None
    top_n: int | None = None
    return_documents: bool = True
    user: str | None = None


class ScoreRequest(RequestModel):
    """vLLM's score request: `text_1` against `text_2`, each a text or a list of texts (one against each,
    or pairwise for two lists of one length)."""

    KNOWN: ClassVar = _KNOWN
    text_1: str | list[str]
    text_2: str | list[str]
    model: str | None = None
    user: str | None = None


class ClassifyRequest(RequestModel):
    """vLLM's classify request: `input` a text or a list of texts."""

    KNOWN: ClassVar = _KNOWN
    input: str | list[str]
    model: str | None = None
    user: str | None = None


def _text(text: str, field: str) -> str:
    if not text:
        raise validation_error(f"`{field}` must not be empty", field.split("[")[0])
    return text


def _service(request: Request, model: str | None) -> InferenceService:
    service: InferenceService = request.app.state.service
    if openai_adapter(service, model) is not None:
        raise validation_error("`model` names a LoRA adapter: adapters are not served for scores", "model")
    return service


def _usage(scored: list[Scored]) -> dict:
    tokens = sum(s.num_prompt_tokens for s in scored)
    return {"prompt_tokens": tokens, "total_tokens": tokens}


async def rerank_documents(req: RerankRequest, request: Request) -> dict:
    """The documents scored against the query, best first."""
    check_fields(req)
    service = _service(request, req.model)
    spec = classifier(service, request.url.path)
    if req.top_n is not None and req.top_n < 0:
        raise validation_error(f"`top_n` must be 0 (all) or more. Given: {req.top_n}", "top_n")
    if not req.documents:
        raise validation_error(
            "`documents` must not be an empty list: there is nothing to rerank", "documents"
        )
    query = _text(req.query, "query")
    texts = [d if isinstance(d, str) else d.text for d in req.documents]
    inputs = [
        ScoreInput((query, _text(t, f"documents[{i}]")), f"documents[{i}]", "query")
        for i, t in enumerate(texts)
    ]
    tracker = service.admit(len(inputs), "this request", "documents")
    scored = await score(service, request, tracker, inputs, None, "documents")
    results = [{"index": i, "relevance_score": activated(spec, s.logits[0])} for i, s in enumerate(scored)]
    results.sort(key=lambda r: -r["relevance_score"])
    if req.top_n:
        results = results[: req.top_n]
    if req.return_documents:
        for r in results:
            r["document"] = {"text": texts[r["index"]]}
    return {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": service.model_name,
        "usage": _usage(scored),
        "results": results,
    }


@router.post("/v1/rerank", responses=_ERRORS)
async def rerank_v1(req: RerankRequest, request: Request) -> dict:
    """Rerank (vLLM's and Jina's `/v1/rerank`)."""
    return await rerank_documents(req, request)


@router.post("/v2/rerank", responses=_ERRORS)
async def rerank_v2(req: RerankRequest, request: Request) -> dict:
    """Rerank (Cohere's `/v2/rerank`)."""
    return await rerank_documents(req, request)


def _pairs(req: ScoreRequest) -> list[ScoreInput]:
    """`text_1` x `text_2` as vLLM pairs them: one against each, or pairwise; a 422 naming the field."""
    first = [req.text_1] if isinstance(req.text_1, str) else req.text_1
    second = [req.text_2] if isinstance(req.text_2, str) else req.text_2
    for name, texts in (("text_1", first), ("text_2", second)):
        if not texts:
            raise validation_error(f"`{name}` must not be an empty list", name)
    if len(first) not in (1, len(second)):
        raise validation_error(
            f"`text_1` has {len(first)} texts and `text_2` {len(second)}: give one `text_1`, or as many as "
            "`text_2`",
            "text_1",
        )
    one = len(first) == 1  # the one `text_1` against each `text_2`
    first = first * len(second) if one else first
    return [
        ScoreInput(
            (_text(a, "text_1" if one else f"text_1[{i}]"), _text(b, f"text_2[{i}]")),
            f"text_2[{i}]",
            "text_1" if one else f"text_1[{i}]",
        )
        for i, (a, b) in enumerate(zip(first, second, strict=True))
    ]


@router.post("/score", responses=_ERRORS)
@router.post("/v1/score", responses=_ERRORS)
async def score_texts(req: ScoreRequest, request: Request) -> dict:
    """vLLM's score: each pair's score (a cross-encoder's activation of its logit)."""
    check_fields(req)
    service = _service(request, req.model)
    spec = classifier(service, request.url.path)
    inputs = _pairs(req)
    tracker = service.admit(len(inputs), "this request", "text_2")
    scored = await score(service, request, tracker, inputs, None, "text_2")
    data = [
        {"index": i, "object": "score", "score": activated(spec, s.logits[0])} for i, s in enumerate(scored)
    ]
    return {
        "id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
        "model": service.model_name, "data": data, "usage": _usage(scored),
    }  # fmt: skip


@router.post("/classify", responses=_ERRORS)
@router.post("/v1/classify", responses=_ERRORS)
async def classify(req: ClassifyRequest, request: Request) -> dict:
    """vLLM's classify: each text's most probable label and every label's probability."""
    check_fields(req)
    service = _service(request, req.model)
    spec = classifier(service)
    texts = [req.input] if isinstance(req.input, str) else req.input
    if not texts:
        raise validation_error("`input` must not be an empty list", "input")
    where = (lambda i: "input") if isinstance(req.input, str) else (lambda i: f"input[{i}]")
    inputs = [ScoreInput((_text(t, where(i)),), where(i)) for i, t in enumerate(texts)]
    tracker = service.admit(len(inputs), "this request", "input")
    scored = await score(service, request, tracker, inputs, None, "input")
    data = []
    for i, s in enumerate(scored):
        probs = probabilities(s.logits)
        best = max(range(len(probs)), key=probs.__getitem__)
        data.append({"index": i, "label": spec.labels[best], "probs": probs, "num_classes": len(probs)})
    return {
        "id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
        "model": service.model_name, "data": data, "usage": _usage(scored),
    }  # fmt: skip
