"""OpenAI's embeddings route, `POST /v1/embeddings`: its request and response, over the service's one
embeddings path (`InferenceService.embed`)."""

from __future__ import annotations

import base64
import struct
from typing import ClassVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from tgi.server.http.errors import OpenAIErrorResponse, unsupported, validation_error
from tgi.server.lora.adapters import openai_adapter
from tgi.server.service.inference import InferenceService
from tgi.server.service.pooling import EmbedRequest, inputs_of, pooling_spec, prompt_text
from tgi.server.validation.fields import NEUTRAL, RequestModel, check_fields

router = APIRouter(tags=["OpenAI"])

ENCODING_FORMATS = ("float", "base64")


class EmbeddingRequest(RequestModel):
    """OpenAI's embeddings request: `input` is a text, a list of texts, a list of token ids, or a list of
    lists of token ids; `encoding_format` "float" or "base64" (little-endian float32, as OpenAI's); `dimensions`
    only for a model that declares Matryoshka dimensions; `user` names the end user and changes nothing, in
    OpenAI's API either."""

    # vLLM's extensions to this request, not served here: refused by name unless neutral
    KNOWN: ClassVar = {
        "truncate_prompt_tokens": NEUTRAL,
        "add_special_tokens": (None, True),
        "priority": (None, 0),
        "normalize": NEUTRAL,
        "embed_dtype": (None, "float32"),
        "request_id": NEUTRAL,
    }

    input: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    encoding_format: str | None = None
    dimensions: int | None = None
    user: str | None = None


def encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    """A vector as OpenAI sends it: floats, or their little-endian float32 bytes in base64."""
    if encoding_format == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


@router.post("/v1/embeddings", responses={code: {"model": OpenAIErrorResponse} for code in (422, 429, 500)})
async def embeddings(req: EmbeddingRequest, request: Request) -> JSONResponse:
    """OpenAI embeddings: each input pooled by the model (normalized where the model has sentence-transformers'
    `Normalize` module)."""
    service: InferenceService = request.app.state.service
    check_fields(req)
    encoding_format = req.encoding_format or "float"
    if encoding_format not in ENCODING_FORMATS:
        raise validation_error(
            f"`encoding_format` must be one of {', '.join(ENCODING_FORMATS)}. Given: {encoding_format!r}",
            "encoding_format",
        )
    spec = pooling_spec(service)
    if openai_adapter(service, req.model) is not None:
        raise unsupported("model", "names a LoRA adapter: adapters are not served for embeddings")
    inputs = inputs_of(req.input, "input")
    tracker = service.admit(len(inputs), "this request", "input")
    # as sentence-transformers encodes: the model's default prompt (if any) before each text
    embed = EmbedRequest(inputs, "input", spec.normalize, req.dimensions, prompt=prompt_text(spec, None))
    vectors = await service.embed(request, tracker, embed)
    tokens = sum(v.num_prompt_tokens for v in vectors)
    data = [
        {"object": "embedding", "index": i, "embedding": encoded(v.vector, encoding_format)}
        for i, v in enumerate(vectors)
    ]
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return JSONResponse({"object": "list", "data": data, "model": service.model_name, "usage": usage})
