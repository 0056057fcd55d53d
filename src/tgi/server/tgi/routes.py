"""TGI's routes: /generate, /generate_stream, / (either), /tokenize, /info, /health, /metrics."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from tgi.core.interfaces import PoolingSpec, QuantizationInfo
from tgi.core.request import TokenEvent
from tgi.core.validation import EMPTY_INPUTS
from tgi.server.http import sse
from tgi.server.http.errors import validation_error
from tgi.server.images.sources import split_markdown
from tgi.server.lora.adapters import tgi_adapter
from tgi.server.observability.metrics import CONTENT_TYPE
from tgi.server.service.generation import SequenceInput
from tgi.server.service.inference import InferenceService
from tgi.server.service.pooling_routes import served_routes
from tgi.server.tgi.parameters import check_truncate, tgi_sampling_params
from tgi.server.tgi.schemas import (
    CompatGenerateRequest,
    ErrorResponse,
    GenerateRequest,
    GenerateResponse,
    Info,
    SimpleToken,
    StreamResponse,
)
from tgi.server.validation.fields import check_fields
from tgi.server.validation.grammars import refuse_if_disabled, tgi_grammar
from tgi.server.validation.sampling import truncated

router = APIRouter(tags=["Text Generation Inference"])

_ERRORS = {
    422: {"model": ErrorResponse, "description": "Input validation error"},
    429: {"model": ErrorResponse, "description": "Model is overloaded"},
    500: {"model": ErrorResponse, "description": "Generation error"},
}


def _service(request: Request) -> InferenceService:
    return request.app.state.service


def token_json(event: TokenEvent) -> dict:
    # `text` of a normal token is its new output text (so that the stream concatenates to
    # generated_text); a special token (EOS) shows its own text, as TGI's do.
    text = event.token_text if event.special else event.text
    return {"id": event.token_id, "text": text, "logprob": event.logprob, "special": event.special}


def top_tokens_json(event: TokenEvent) -> list[dict]:
    return [
        {"id": t.id, "text": t.text, "logprob": t.logprob, "special": t.special} for t in event.top_tokens
    ]


async def prepare(service: InferenceService, req: GenerateRequest, stream: bool) -> list[SequenceInput]:
    """The request checked for its HTTP shape and tokenised (off the loop), `best_of` sequences of it (the
    engine validates it when `InferenceService.generate` hands it over)."""
    check_fields(req)
    if not req.inputs:  # before tokenizing: a tokenizer that adds BOS would make it one token
        raise validation_error(EMPTY_INPUTS)
    params = tgi_sampling_params(req.parameters, service.settings, stream)
    params = replace(params, adapter_id=tgi_adapter(service, req.parameters.adapter_id))
    truncate = check_truncate(req.parameters.truncate, service.engine.config)
    field = None
    if req.parameters.grammar is not None:
        field = "parameters.grammar"
        grammar = tgi_grammar(req.parameters.grammar, field)
        refuse_if_disabled(grammar, service.settings.disable_grammar_support, field)
        params = replace(params, grammar=grammar)  # compiled once, by the engine's validation
    pieces, refs = split_markdown(req.inputs)
    if not refs:
        ids, images = await service.encode(req.inputs), ()
    else:  # TGI's markdown images: each one's placeholder where it stood, expanded by the model's processor
        ids, images = await service.encode_with_images(service.image_token(refs).join(pieces), refs)
    ids = truncated(ids, truncate, "parameters.truncate", service.engine.config.max_input_tokens, bool(refs))
    n, salt = req.parameters.best_of or 1, req.parameters.cache_salt
    return [SequenceInput(ids, params, field, n=n, images=images, cache_salt=salt)]


def _sequence(events: list[TokenEvent], req: GenerateRequest) -> dict:
    final = events[-1]
    prefix = req.inputs if req.parameters.return_full_text else ""
    prefill = [{"id": t.id, "text": t.text, "logprob": t.logprob} for t in (final.prompt_tokens or ())]
    return {
        "generated_text": prefix + (final.generated_text or ""),
        "finish_reason": final.finish_reason.value,
        "generated_tokens": len(events),
        "seed": final.seed,
        "prefill": prefill,
        "tokens": [token_json(e) for e in events],
        "top_tokens": [top_tokens_json(e) for e in events] if req.parameters.top_n_tokens else [],
    }


async def generate_json(
    service: InferenceService, req: GenerateRequest, request: Request
) -> tuple[dict, dict[str, str]]:
    tracker = service.admit(_sequences(service, req), "`best_of`", "best_of")
    best_of = req.parameters.best_of or 1
    inputs = prepare(service, req, stream=False)
    generation = await service.generate(request, tracker, inputs, stream=False)
    results = generation.results
    sequences = [_sequence(events, req) for events in results]
    logprob_sums = [sum(e.logprob or 0.0 for e in events) for events in results]
    best = max(range(best_of), key=logprob_sums.__getitem__)
    chosen = sequences[best]
    body: dict = {"generated_text": chosen.pop("generated_text")}
    if req.parameters.details:
        if best_of > 1:
            chosen["best_of_sequences"] = [s for i, s in enumerate(sequences) if i != best]
        body["details"] = chosen
    final = results[best][-1]
    headers = {
        "x-compute-type": service.engine.backend_name,
        "x-total-time": str(int((time.perf_counter() - tracker.started) * 1000)),
        "x-queue-time": str(int(final.queue_time * 1000)),
        "x-inference-time": str(int(final.inference_time * 1000)),
        "x-time-per-token": str(int(final.inference_time * 1000 / max(len(results[best]), 1))),
        "x-prompt-tokens": str(len(generation.requests[best].prompt_token_ids)),
        "x-generated-tokens": str(len(results[best])),
    }
    return body, headers


def _sequences(service: InferenceService, req: GenerateRequest) -> int:
    """Concurrency slots a request takes: `best_of` of them (an out-of-range value gets its 422 next)."""
    return min(max(req.parameters.best_of or 1, 1), service.settings.max_best_of)


async def generate_sse(service: InferenceService, req: GenerateRequest, request: Request) -> Response:
    tracker = service.admit()
    inputs = prepare(service, req, stream=True)
    generation = await service.generate(request, tracker, inputs, stream=True)
    input_length = len(generation.requests[0].prompt_token_ids)

    async def chunks() -> AsyncIterator[bytes]:
        async for _, event in generation.events():
            out: dict = {
                "index": event.index + 1,
                "token": token_json(event),
                "top_tokens": top_tokens_json(event),
                "generated_text": None,
                "details": None,
            }
            if event.finish_reason is not None:
                prefix = req.inputs if req.parameters.return_full_text else ""
                out["generated_text"] = prefix + (event.generated_text or "")
                if req.parameters.details:
                    out["details"] = {
                        "finish_reason": event.finish_reason.value,
                        "generated_tokens": event.index + 1,
                        "seed": event.seed,
                        "input_length": input_length,
                    }
            yield sse.event(out)

    # after the headers, TGI sends an error as the last event
    body = generation.body(chunks(), request.url.path)
    return sse.EventStreamResponse(body, service.settings.stream_write_timeout_s)


@router.post("/generate", response_model=GenerateResponse, responses=_ERRORS)
async def generate(req: GenerateRequest, request: Request) -> Response:
    """Generate tokens."""
    body, headers = await generate_json(_service(request), req, request)
    return JSONResponse(body, headers=headers)


@router.post(
    "/generate_stream",
    responses={200: {"model": StreamResponse, "content": {"text/event-stream": {}}}, **_ERRORS},
)
async def generate_stream(req: GenerateRequest, request: Request) -> Response:
    """Generate a stream of tokens with Server-Sent Events."""
    return await generate_sse(_service(request), req, request)


@router.post("/", responses={200: {"model": list[GenerateResponse]}, **_ERRORS})
async def compat_generate(req: CompatGenerateRequest, request: Request) -> Response:
    """Generate tokens if `stream == false` (a list of one response), or a stream of tokens."""
    service = _service(request)
    if req.stream:
        return await generate_sse(service, req, request)
    body, headers = await generate_json(service, req, request)
    return JSONResponse([body], headers=headers)


@router.post("/tokenize", response_model=list[SimpleToken], responses=_ERRORS)
async def tokenize(req: GenerateRequest, request: Request) -> Response:
    """Tokenize inputs (at most `max_input_tokens` tokens, else a 422)."""
    service = _service(request)
    with service.admit(metered=False):  # a slot, but not a generation request in the metrics
        check_fields(req)
        body = await service.token_spans_json(req.inputs)  # built and serialised off the event loop
    return Response(body, media_type="application/json")


@router.get("/info", response_model=Info)
async def info(request: Request) -> dict:
    """Text Generation Inference endpoint info."""
    from tgi.server import __version__

    service = _service(request)
    engine, settings = service.engine, service.settings
    cfg = engine.config
    pooling = engine.model_info.pooling
    return {
        "model_id": service.model_name,
        "model_sha": None,
        "model_dtype": engine.model_info.dtype,
        "model_device_type": engine.backend_name,
        "model_pipeline_tag": _PIPELINE_TAGS[pooling.kind if pooling is not None else None],
        "max_concurrent_requests": settings.max_concurrent_requests,
        "max_best_of": settings.max_best_of,
        "max_stop_sequences": settings.max_stop_sequences,
        "max_input_tokens": cfg.max_input_tokens,
        "max_input_length": cfg.max_input_tokens,
        "max_total_tokens": cfg.max_total_tokens,
        "max_batch_prefill_tokens": cfg.max_batch_prefill_tokens,
        "max_batch_total_tokens": cfg.max_batch_total_tokens,
        "max_top_n_tokens": settings.max_top_n_tokens,
        "max_client_batch_size": settings.max_client_batch_size,
        "validation_workers": settings.validation_workers,
        "router": "tgi",
        "version": __version__,
        "sha": None,
        "docker_label": None,
        "backend": engine.backend_name,
        "prefix_caching": cfg.prefix_caching,
        "kv_cache_dtype": cfg.kv_cache_dtype,
        "deterministic": cfg.deterministic,
        "speculate": cfg.speculate,
        "speculation": engine.speculation,
        "kernels": engine.kernels,
        **_quantization(engine.model_info.quantization),
        "pooling": _pooling(pooling),
    }


_PIPELINE_TAGS = {
    None: "text-generation",
    "embed": "feature-extraction",
    "classify": "text-classification",
    "sparse": "feature-extraction",
}


def _pooling(spec: PoolingSpec | None) -> dict[str, Any] | None:
    if spec is None:
        return None
    return {
        "mode": spec.mode,
        "normalize": spec.normalize,
        "dimension": spec.dimension,
        "matryoshka_dimensions": list(spec.matryoshka_dimensions) if spec.matryoshka else None,
        "prompts": sorted(spec.prompts),
        "kind": spec.kind,
        "labels": list(spec.labels) or None,
        "routes": served_routes(spec),
    }


def _quantization(q: QuantizationInfo | None) -> dict[str, Any]:
    """/info's `quantize` and `quantization` from `ModelInfo.quantization`."""
    if q is None:
        return {"quantize": None, "quantization": None}
    details = {
        "weight_format": q.weight_format,
        "source": q.source,
        "num_linears": q.num_linears,
        "kernel": q.kernel,
        "description": q.description,
    }
    return {"quantize": q.method, "quantization": details}


@router.get("/health", responses={503: {"model": ErrorResponse}})
async def health(request: Request) -> Response:
    """Everything is working fine (no auth needed); 503 once the engine has died."""
    if not _service(request).healthy:
        return JSONResponse({"error": "unhealthy", "error_type": "healthcheck"}, status_code=503)
    return Response(status_code=200)


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus metrics (TGI's names; gauges read from the engine at each scrape)."""
    return Response(_service(request).metrics.render(), media_type=CONTENT_TYPE)
