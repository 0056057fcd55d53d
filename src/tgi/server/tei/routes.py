"""TEI's (Text Embeddings Inference's) `POST /embed`: its request and response, over the service's one
embeddings path (`InferenceService.embed`); its `/rerank` and `/predict` are in `tgi.server.tei.scores`. Errors in TGI's shape (`{"error", "error_type"}`), as TEI's."""

from __future__ import annotations

from fastapi import APIRouter, Request

from tgi.server.http.errors import validation_error
from tgi.server.service.inference import InferenceService
from tgi.server.service.pooling import EmbedRequest, inputs_of, pooling_spec, prompt_text
from tgi.server.validation.fields import RequestModel, check_fields

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


class EmbedBody(RequestModel):
    """TEI's embed request: `inputs` a text, a list of texts, token ids or lists of them; `normalize`
    (default true); `truncate` an input past `--max-input-tokens` instead of refusing it, from
    `truncation_direction` ("Right", the default, or "Left"); `prompt_name` one of the model's
    sentence-transformers prompts put before each text; `dimensions` (Matryoshka models only)."""

    inputs: str | list[str] | list[int] | list[list[int]]
    normalize: bool = True
    truncate: bool | None = None
    truncation_direction: str | None = None
    prompt_name: str | None = None
    dimensions: int | None = None


@router.post("/embed")
async def embed(req: EmbedBody, request: Request) -> list[list[float]]:
    """TEI's embed: one vector per input, in order."""
    service: InferenceService = request.app.state.service
    check_fields(req)
    truncate = truncation(req.truncate, req.truncation_direction)
    spec = pooling_spec(service)
    prompt = prompt_text(spec, req.prompt_name)
    inputs = inputs_of(req.inputs, "inputs")
    tracker = service.admit(len(inputs), "this request", "inputs")
    asked = EmbedRequest(inputs, "inputs", req.normalize, req.dimensions, truncate=truncate, prompt=prompt)
    return [v.vector for v in await service.embed(request, tracker, asked)]
