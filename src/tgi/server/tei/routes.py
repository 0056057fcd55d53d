"""TEI's (Text Embeddings Inference's) `POST /embed`, `POST /embed_all` (every token's hidden state) and
`POST /embed_sparse` (a sparse embedder's weights): their requests and responses, over the service's one
embeddings path (`InferenceService.embed`); its `/rerank` and `/predict` are in `tgi.server.tei.scores`, its
`/similarity` in `tgi.server.tei.similarity`. Errors in TGI's shape (`{"error", "error_type"}`), as TEI's."""

from __future__ import annotations

from typing import Any, ClassVar

from fastapi import APIRouter, Request
from pydantic import BaseModel

from tgi.server.http.errors import validation_error
from tgi.server.service.inference import InferenceService
from tgi.server.service.pooling import (
    Embedding,
    EmbedRequest,
    inputs_of,
    pooling_spec,
    prompt_text,
)
from tgi.server.service.pooling_routes import serves
from tgi.server.validation.fields import NEUTRAL, RequestModel, check_fields

router = APIRouter(tags=["Text Embeddings Inference"])

TRUNCATION_DIRECTIONS = {"Right": "right", "Left": "left"}


def truncation(truncate: bool | None, direction: str | None) -> str | None:
    """TEI's `truncate` and `truncation_direction` as the service's ("right", "left", or None: refuse an
    input too long); a 422 naming `truncation_direction` for another value, or one given without
    `truncate` (it would ask for nothing)."""
    direction = direction or "Right"
    if direction not in TRUNCATION_DIRECTIONS:
        raise validation_error(
            f"`truncation_direction` must be Right or Left. Given: {direction!r}", "truncation_direction"
        )
    if direction == "Left" and not truncate:
        raise validation_error(
            "`truncation_direction` applies only with `truncate: true`", "truncation_direction"
        )
    return TRUNCATION_DIRECTIONS[direction] if truncate else None


class InputsBody(RequestModel):
    """What TEI's embeddings requests share: `inputs` a text, a list of texts, token ids or lists of them;
    `truncate` an input past `--max-input-tokens` instead of refusing it, from `truncation_direction`
    ("Right", the default, or "Left"); `prompt_name` one of the model's sentence-transformers prompts put
    before each text (by default the model's own)."""

    inputs: str | list[str] | list[int] | list[list[int]]
    truncate: bool | None = None
    truncation_direction: str | None = None
    prompt_name: str | None = None


class EmbedBody(InputsBody):
    """TEI's embed request: `InputsBody`'s, `normalize` (default true) and `dimensions` (Matryoshka models
    only)."""

    normalize: bool = True
    dimensions: int | None = None


class EmbedAllBody(InputsBody):
    """TEI's embed_all (and embed_sparse) request: `InputsBody`'s; no `normalize` nor `dimensions` (the
    hidden states come as they are)."""

    KNOWN: ClassVar = {"normalize": NEUTRAL, "dimensions": NEUTRAL}  # `/embed`'s, not TEI's here


async def embedded(req: InputsBody, request: Request, kind: str = "embed", **how: Any) -> list[Embedding]:
    """Each of `req`'s inputs through the service's one embeddings path, of a pooling model of `kind`, asked
    `how` (`EmbedRequest`'s `normalize`, `dimensions`, `token_embeddings`), after the checks every TEI
    embeddings route makes."""
    service: InferenceService = request.app.state.service
    check_fields(req)
    truncate = truncation(req.truncate, req.truncation_direction)
    prompt = prompt_text(pooling_spec(service, kind), req.prompt_name)
    inputs = inputs_of(req.inputs, "inputs")
    tracker = service.admit(len(inputs), "this request", "inputs")
    asked = EmbedRequest(inputs, "inputs", truncate=truncate, prompt=prompt, kind=kind, **how)
    return await service.embed(request, tracker, asked)


@router.post("/embed")
async def embed(req: EmbedBody, request: Request) -> list[list[float]]:
    """TEI's embed: one vector per input, in order."""
    answers = await embedded(req, request, normalize=req.normalize, dimensions=req.dimensions)
    return [e.vector for e in answers]


@router.post("/embed_all")
async def embed_all(req: EmbedAllBody, request: Request) -> list[list[list[float]]]:
    """TEI's embed_all: for each input, in order, the final hidden state of each of its tokens (its prompt's
    and special tokens' included), unpooled and not normalized."""
    answers = await embedded(req, request, normalize=False, token_embeddings=True)
    return [e.tokens or [] for e in answers]


class SparseValue(BaseModel):
    """One non-zero weight of a sparse embedding: its vocabulary index and its value."""

    index: int
    value: float


@router.post("/embed_sparse")
async def embed_sparse(req: EmbedAllBody, request: Request) -> list[list[SparseValue]]:
    """TEI's embed_sparse, served by a sparse embedder (SPLADE) only: for each input, in order, its non-zero
    vocabulary weights as `{index, value}` (by index). An embedder without a sparse head answers a 422 saying
    what it serves, as the other pooling routes answer a model of another kind."""
    service: InferenceService = request.app.state.service
    spec = service.engine.model_info.pooling
    if spec is not None and spec.kind == "embed":
        check_fields(req)
        raise validation_error(
            f"POST /embed_sparse is served for a sparse embedder (SPLADE); the model {service.model_name} "
            f"serves {serves(spec)}: it has no sparse head"
        )
    answers = await embedded(req, request, kind="sparse", normalize=False)
    return [[SparseValue(index=i, value=v) for i, v in enumerate(e.vector) if v != 0.0] for e in answers]
