"""Ollama's embeddings routes for a pooling model, over the service's one embeddings path
(`InferenceService.embed`): `POST /api/embed` (`input` a text or texts, `truncate`, `dimensions`; answers
`{model, embeddings, total_duration, load_duration, prompt_eval_count}`) and the older `POST /api/embeddings`
(`prompt`; answers `{embedding}`). The vectors are the model's (normalized where it has sentence-transformers'
`Normalize` module, with its default prompt), as OpenAI's route answers them. Errors in Ollama's shape."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request

from tgi.server.http.errors import unsupported, validation_error
from tgi.server.ollama.inputs import check_keep_alive, served_model
from tgi.server.service.inference import InferenceService
from tgi.server.service.pooling import EmbedRequest, inputs_of, pooling_spec, prompt_text
from tgi.server.validation.fields import RequestModel, check_fields

router = APIRouter(tags=["Ollama"])


class EmbedFields(RequestModel):
    """What both routes share: `model` (the served one), `keep_alive` (negative or none: the model stays
    loaded), `options` (none served for embeddings: refused by name)."""

    model: str = ""
    keep_alive: int | float | str | None = None
    options: dict[str, Any] | None = None


class EmbedRequestBody(EmbedFields):
    """`/api/embed`: `input` a text or a list of texts; `truncate` (default true, as Ollama's) cuts an input
    past `--max-input-tokens` to its first tokens, false refuses it; `dimensions` (Matryoshka models only)."""

    input: str | list[str]
    truncate: bool | None = None  # None: true
    dimensions: int | None = None


class EmbeddingsRequestBody(EmbedFields):
    """`/api/embeddings` (Ollama's older route): `prompt`, one text."""

    prompt: str


def _checked(service: InferenceService, req: EmbedFields) -> str:
    """The prompt put before each text (the model's default), once the shared fields are checked."""
    check_fields(req)
    if served_model(service, req.model) is not None:
        raise unsupported("model", "names a LoRA adapter: adapters are not served for embeddings")
    check_keep_alive(service, req.keep_alive)
    if req.options:
        raise unsupported(
            "options", f"are not served for embeddings (given: {', '.join(sorted(req.options))})"
        )
    return prompt_text(pooling_spec(service), None)


@router.post("/api/embed")
async def embed(req: EmbedRequestBody, request: Request) -> dict:
    """One vector per input, in order, with Ollama's durations (nanoseconds) and the prompts' token count."""
    start = time.monotonic()
    service: InferenceService = request.app.state.service
    prompt = _checked(service, req)
    spec = pooling_spec(service)
    inputs = inputs_of(req.input, "input")
    tracker = service.admit(len(inputs), "this request", "input")
    asked = EmbedRequest(
        inputs,
        "input",
        spec.normalize,
        req.dimensions,
        truncate=None if req.truncate is False else "right",
        prompt=prompt,
    )
    vectors = await service.embed(request, tracker, asked)
    return {
        "model": req.model,
        "embeddings": [v.vector for v in vectors],
        "total_duration": int((time.monotonic() - start) * 1e9),
        "load_duration": 0,  # the model is loaded with the server
        "prompt_eval_count": sum(v.num_prompt_tokens for v in vectors),
    }


@router.post("/api/embeddings")
async def embeddings(req: EmbeddingsRequestBody, request: Request) -> dict:
    """The prompt's one vector."""
    service: InferenceService = request.app.state.service
    prompt = _checked(service, req)
    if not req.prompt:
        raise validation_error("`prompt` must not be empty", "prompt")
    spec = pooling_spec(service)
    tracker = service.admit(1, "this request", "prompt")
    asked = EmbedRequest([req.prompt], "prompt", spec.normalize, prompt=prompt)
    return {"embedding": (await service.embed(request, tracker, asked))[0].vector}
