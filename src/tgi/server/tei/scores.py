"""TEI's (Text Embeddings Inference's) classifier routes, `POST /rerank` (a query's texts scored by a
cross-encoder, best first) and `POST /predict` (a classifier's labels of a text or a pair of texts), over the
service's one scoring path (`tgi.server.service.scoring`). Errors in TGI's shape, as TEI's."""

from __future__ import annotations

from fastapi import APIRouter, Request

from tgi.server.http.errors import validation_error
from tgi.server.service.inference import InferenceService
from tgi.server.service.scoring import ScoreInput, activated, classifier, probabilities, score
from tgi.server.tei.routes import truncation
from tgi.server.validation.fields import RequestModel, check_fields

router = APIRouter(tags=["Text Embeddings Inference"])


class RerankBody(RequestModel):
    """TEI's rerank request: `query` and its `texts`, each scored as the pair (query, text); `raw_scores`:
    the logit instead of the model's activation of it; `return_text`: each text in its result; `truncate`
    and `truncation_direction` as `/embed`'s (the text of a pair is cut, never the query)."""

    query: str
    texts: list[str]
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool | None = None
    truncation_direction: str | None = None


class PredictBody(RequestModel):
    """TEI's predict request: `inputs` one text, one pair (`[text, text]`), or a list of them (a list of more
    than two texts is a list of texts); `raw_scores`: the logits instead of the probabilities."""

    inputs: str | list[str] | list[str | list[str]]
    raw_scores: bool = False
    truncate: bool | None = None
    truncation_direction: str | None = None


def _nonempty(text: str, field: str) -> str:
    if not text:
        raise validation_error(f"`{field}` must not be empty", field.split("[")[0])
    return text


# `POST /rerank` is TEI's for a body with `texts`, vLLM's and Jina's for one with `documents`: `tgi.server.app`
# routes it to this function or to `tgi.server.vllm.routes.rerank_documents`
async def rerank(req: RerankBody, request: Request) -> list[dict]:
    """Each text's score against the query, best first (`index`: its place in `texts`)."""
    service: InferenceService = request.app.state.service
    check_fields(req)
    truncate = truncation(req.truncate, req.truncation_direction)
    spec = classifier(service, "POST /rerank")
    query = _nonempty(req.query, "query")
    if not req.texts:
        raise validation_error("`texts` must not be an empty list: there is nothing to rerank", "texts")
    inputs = [
        ScoreInput((query, _nonempty(t, f"texts[{i}]")), f"texts[{i}]", "query")
        for i, t in enumerate(req.texts)
    ]
    tracker = service.admit(len(inputs), "this request", "texts")
    scored = await score(service, request, tracker, inputs, truncate, "texts")
    results = []
    for i, s in enumerate(scored):
        result = {"index": i, "score": s.logits[0] if req.raw_scores else activated(spec, s.logits[0])}
        if req.return_text:
            result["text"] = req.texts[i]
        results.append(result)
    return sorted(results, key=lambda r: -r["score"])


def _predict_inputs(given: str | list) -> tuple[list[ScoreInput], bool]:
    """TEI's `inputs` as the service's inputs, and whether they were one input (answered as one list)."""
    if isinstance(given, str):
        return [ScoreInput((_nonempty(given, "inputs"),), "inputs")], True
    if given and len(given) <= 2 and all(isinstance(t, str) for t in given):
        return [ScoreInput(tuple(_nonempty(t, f"inputs[{i}]") for i, t in enumerate(given)), "inputs")], True
    if not given:
        raise validation_error("`inputs` must not be an empty list", "inputs")
    items = []
    for i, x in enumerate(given):
        texts = [x] if isinstance(x, str) else x
        if not 1 <= len(texts) <= 2:
            raise validation_error(f"`inputs[{i}]` must be a text or a pair of texts", "inputs")
        items.append(ScoreInput(tuple(_nonempty(t, f"inputs[{i}]") for t in texts), f"inputs[{i}]"))
    return items, False


@router.post("/predict")
async def predict(req: PredictBody, request: Request) -> list:
    """Each input's labels with their scores, best first: a list of `{label, score}` for one input, a list of
    them for a list of inputs."""
    service: InferenceService = request.app.state.service
    check_fields(req)
    truncate = truncation(req.truncate, req.truncation_direction)
    spec = classifier(service)
    inputs, single = _predict_inputs(req.inputs)
    tracker = service.admit(len(inputs), "this request", "inputs")
    answers = []
    for s in await score(service, request, tracker, inputs, truncate, "inputs"):
        scores = s.logits if req.raw_scores else probabilities(s.logits)
        labelled = [{"label": label, "score": v} for label, v in zip(spec.labels, scores, strict=True)]
        answers.append(sorted(labelled, key=lambda r: -r["score"]))
    return answers[0] if single else answers
