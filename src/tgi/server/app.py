"""`create_app(engine, settings)`: the FastAPI application, its routers, error handlers and lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from pydantic import ValidationError as PydanticValidationError

from tgi.core.config import EngineConfig
from tgi.server import __version__
from tgi.server.anthropic.errors import ANTHROPIC_ERRORS
from tgi.server.anthropic.routes import router as anthropic_router
from tgi.server.http.auth import BearerAuth
from tgi.server.http.errors import install_error_handlers, register_dialect, validation_error
from tgi.server.http.payload import PayloadLimit
from tgi.server.lora.routes import router as lora_router
from tgi.server.ollama.embeddings import router as ollama_embeddings_router
from tgi.server.ollama.errors import OLLAMA_ERRORS
from tgi.server.ollama.routes import router as ollama_router
from tgi.server.openai.embeddings import router as embeddings_router
from tgi.server.openai.routes import router as openai_router
from tgi.server.responses.routes import router as responses_router
from tgi.server.responses.store import ResponsesStore
from tgi.server.sagemaker.routes import router as sagemaker_router
from tgi.server.served_models.selection import ModelSelection
from tgi.server.service.inference import InferenceService
from tgi.server.service.protocol import ServingEngine
from tgi.server.service.settings import ServerSettings
from tgi.server.swap.routes import router as admin_router
from tgi.server.swap.swapper import ModelSwapper
from tgi.server.tei.routes import router as tei_router
from tgi.server.tei.scores import RerankBody
from tgi.server.tei.scores import rerank as tei_rerank
from tgi.server.tei.scores import router as tei_scores_router
from tgi.server.tei.similarity import router as tei_similarity_router
from tgi.server.tgi.chat_tokenize import router as chat_tokenize_router
from tgi.server.tgi.flush_cache import router as flush_cache_router
from tgi.server.tgi.routes import router as tgi_router
from tgi.server.vllm.errors import VLLM_ERRORS
from tgi.server.vllm.routes import RerankRequest, rerank_documents
from tgi.server.vllm.routes import router as vllm_router

log = logging.getLogger("tgi.server")


async def rerank(request: Request) -> object:
    """`POST /rerank`, two APIs' route: TEI's for a body with `texts` (its answer a list), vLLM's and Jina's
    for one with `documents` (`{results, usage}`)."""
    try:
        body = await request.json()
    except ValueError:
        raise validation_error("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise validation_error("the body must be a JSON object")
    model, route = (RerankRequest, rerank_documents) if "documents" in body else (RerankBody, tei_rerank)
    try:
        parsed = model.model_validate(body)
    except PydanticValidationError as exc:  # worded as every other 422
        raise RequestValidationError(exc.errors()) from None
    return await route(parsed, request)


def create_app(
    engine: ServingEngine,
    settings: ServerSettings | None = None,
    models: list[tuple[str, EngineConfig]] | None = None,
) -> FastAPI:
    """The application serving `engine`; with `models` (the names and configs of several models, the first
    `engine`'s), each by its name, loaded on demand (`tgi.server.served_models`)."""
    settings = settings or ServerSettings()
    service = InferenceService(engine, settings)
    if models and len(models) > 1:
        from tgi.server.served_models.loading import model_pool

        service.pool = model_pool(service, engine, models)
    if settings.otlp_endpoint:
        from tgi.server.observability.tracing import Tracing

        service.tracing = Tracing(settings.otlp_endpoint, settings.otlp_service_name)

    # the lifespan reaches the engine through the service only: a closure over `engine` would keep the
    # start-up model alive after a swap (`tgi.server.swap.swapper`)
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.start_engine:
            await service.current_engine.start()
        if service.pool is not None:
            service.pool.on_death = service.current_engine.on_death
            service.pool.start_reaper()
        if callable(settings.on_ready):
            settings.on_ready()
        try:
            yield
        finally:
            if settings.start_engine:
                # uvicorn has already waited up to its graceful timeout for in-flight responses and
                # cancelled the rest; whatever the engine still holds is cancelled here.
                if service.pool is not None:
                    await service.pool.shutdown(cancel_inflight=True)
                else:
                    await service.current_engine.shutdown(cancel_inflight=True)  # swapped in, or the first
                log.info("engine stopped")
            if service.tracing is not None:
                await asyncio.to_thread(service.tracing.shutdown)  # the last spans, off the event loop

    app = FastAPI(
        title="Text Generation Inference",
        description="TGI- and OpenAI-compatible LLM inference server",
        version=__version__,
        docs_url="/docs",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.swapper = ModelSwapper(service)
    app.state.responses_store = ResponsesStore(
        settings.responses_store_max_entries,
        settings.responses_store_max_age_s,
        max_bytes=settings.responses_store_max_bytes,
    )
    install_error_handlers(app)
    register_dialect(ANTHROPIC_ERRORS)  # Anthropic's shape on its paths, whoever raises the error
    register_dialect(OLLAMA_ERRORS)  # Ollama's on `/api/*`
    register_dialect(VLLM_ERRORS)  # OpenAI's on vLLM's scoring routes outside `/v1`
    app.include_router(tgi_router)
    app.include_router(openai_router)
    app.include_router(embeddings_router)
    app.include_router(tei_router)
    app.include_router(tei_scores_router)
    app.include_router(tei_similarity_router)
    app.include_router(vllm_router)
    app.add_api_route("/rerank", rerank, methods=["POST"], tags=["Text Embeddings Inference", "vLLM scoring"])
    app.include_router(anthropic_router)
    app.include_router(responses_router)
    app.include_router(ollama_router)
    app.include_router(ollama_embeddings_router)
    app.include_router(sagemaker_router)
    app.include_router(chat_tokenize_router)
    app.include_router(flush_cache_router)
    app.include_router(admin_router)
    app.include_router(lora_router)
    if service.pool is not None:  # inside the body's limit and the key check: neither loads a model
        app.add_middleware(ModelSelection, pool=service.pool)
    app.add_middleware(PayloadLimit, limit=settings.payload_limit)
    if service.tracing is not None:  # inside the key check: a refused request is not traced
        app.add_middleware(service.tracing.middleware_class, tracing=service.tracing)
    if settings.api_key or settings.api_keys or settings.admin_api_key:  # outermost: a client without the key
        app.add_middleware(  # learns nothing else
            BearerAuth,
            api_key=settings.api_key,
            admin_api_key=settings.admin_api_key,
            api_keys=settings.api_keys,
        )
    if settings.cors_allow_origin:  # outside the key check: a browser's preflight carries no key
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_allow_origin),
            allow_methods=["GET", "POST", "DELETE"],  # DELETE: /v1/responses/{id}
            allow_headers=[
                "content-type",
                "authorization",
                "x-api-key",
                "anthropic-version",
                "anthropic-beta",
            ],
        )
    return app
