"""TEI's (Text Embeddings Inference's) `POST /similarity` (Hugging Face's sentence-similarity task): a source
sentence against each of a list of sentences, their cosine similarity, over the service's one embeddings
path (`InferenceService.embed`: the source and the sentences in one admission, batched by the engine's
scheduler). Errors in TGI's shape, as TEI's."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from fastapi import APIRouter, Request

from tgi.server.http.errors import validation_error
from tgi.server.service.inference import InferenceService
from tgi.server.service.pooling import EmbedRequest, pooling_spec, prompt_text
from tgi.server.tei.routes import truncation
from tgi.server.validation.fields import RequestModel, check_fields

router = APIRouter(tags=["Text Embeddings Inference"])


class SimilarityInputs(RequestModel):
    """The texts compared: `source_sentence` against each of `sentences`."""

    source_sentence: str
    sentences: list[str]


class SimilarityParameters(RequestModel):
    """TEI's parameters of a similarity request: `truncate` and `truncation_direction` as `/embed`'s,
    `prompt_name` one of the model's prompts put before every text (by default the model's own)."""

    truncate: bool | None = None
    truncation_direction: str | None = None
    prompt_name: str | None = None


class SimilarityBody(RequestModel):
    """TEI's similarity request: `inputs` (`source_sentence`, `sentences`) and its optional `parameters`.
    `/embed`'s fields at the top level are refused by name: TEI reads them in `parameters` only."""

    inputs: SimilarityInputs
    parameters: SimilarityParameters | None = None

    def refusals(self) -> Iterator[tuple[str, str]]:
        for name in ("truncate", "truncation_direction", "prompt_name", "normalize", "dimensions"):
            if (self.model_extra or {}).get(name) is not None:
                yield name, "is read in `parameters` on /similarity, as TEI reads it"


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (0.0 where one of them is zero)."""
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norms if norms else 0.0


@router.post("/similarity")
async def similarity(req: SimilarityBody, request: Request) -> list[float]:
    """The cosine similarity of the source sentence's embedding with each sentence's, in order."""
    service: InferenceService = request.app.state.service
    check_fields(req)
    params = req.parameters or SimilarityParameters()
    truncate = truncation(params.truncate, params.truncation_direction)
    spec = pooling_spec(service)
    prompt = prompt_text(spec, params.prompt_name)
    source, sentences = req.inputs.source_sentence, req.inputs.sentences
    if not source:
        raise validation_error("`inputs.source_sentence` must not be empty", "inputs.source_sentence")
    if not sentences:
        raise validation_error("`inputs.sentences` must not be an empty list", "inputs.sentences")
    for i, text in enumerate(sentences):
        if not text:
            raise validation_error(f"`inputs.sentences[{i}]` must not be empty", "inputs.sentences")
    texts = [source, *sentences]
    tracker = service.admit(len(texts), "this request", "inputs.sentences")
    names = ["inputs.source_sentence"] + [f"inputs.sentences[{i}]" for i in range(len(sentences))]
    asked = EmbedRequest(texts, "inputs", False, truncate=truncate, prompt=prompt, input_names=names)
    first, *others = await service.embed(request, tracker, asked)
    return [cosine(first.vector, other.vector) for other in others]
