"""Ollama's API for the models the server runs (one, or several: `tgi.server.served_models`): `POST /api/generate` and `POST /api/chat` (NDJSON streams
by default, one body with `stream: false`), `GET /api/tags`, `POST /api/show`, `GET /api/ps`,
`GET /api/version`. The request's fields are in `tgi.server.ollama.schemas`, the prompt in
`tgi.server.ollama.inputs`, the options in `tgi.server.ollama.options`, the bodies in
`tgi.server.ollama.format` and `tgi.server.ollama.models`, the errors' shape in `tgi.server.ollama.errors`.

The embeddings routes (`/api/embed`, `/api/embeddings`) are in `tgi.server.ollama.embeddings`. Not served,
each a 501 that says why: the model store's (`/api/pull`, `/api/push`, `/api/create`, `/api/copy`,
`/api/delete`, `/api/blobs/...`: this server serves the models named at its launch).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from tgi.server import __version__
from tgi.server.chat.parsers import OutputParsers, own_format_tools, reasoning_of, render_prompt, resolve
from tgi.server.chat.tools import ToolPlan
from tgi.server.http import sse
from tgi.server.http.errors import ApiError, unsupported
from tgi.server.ollama import inputs, models
from tgi.server.ollama.errors import ndjson, ndjson_error
from tgi.server.ollama.format import ReplyWriter, load_response
from tgi.server.ollama.options import sampling_params
from tgi.server.ollama.schemas import ChatRequest, GenerateRequest, GenerationFields, ShowRequest
from tgi.server.service.generation import Generation, SequenceInput
from tgi.server.service.inference import InferenceService
from tgi.server.validation.fields import check_fields
from tgi.server.validation.grammars import refuse_if_disabled

router = APIRouter(tags=["Ollama"])

NDJSON = "application/x-ndjson"


@dataclass(frozen=True, kw_only=True)
class Reply(SequenceInput):
    """The request's one prompt, and how to read its reply back."""

    tools: ToolPlan | None = None
    parsers: OutputParsers = field(default_factory=OutputParsers)


def _service(request: Request) -> InferenceService:
    return request.app.state.service


def _checked(service: InferenceService, req: GenerationFields) -> str | None:
    """The request's HTTP-shape checks; the LoRA adapter its `model` names (None: the base model)."""
    check_fields(req)
    adapter = inputs.served_model(service, req.model)
    inputs.check_keep_alive(service, req.keep_alive)
    return adapter


def _params(service: InferenceService, req: GenerationFields, plan: ToolPlan | None, adapter: str | None):
    """The sampling parameters with the request's one grammar (`tools` or `format`), and its field."""
    params = sampling_params(req.options, service.settings, service.engine.config)
    grammar = inputs.format_grammar(req.format)
    tools = plan.grammar if plan is not None else None
    if grammar is not None and tools is not None:  # Ollama's `format` shapes the answer, not the calls
        raise unsupported("format", "is not served with `tools`: a tool call's arguments follow its schema")
    found = ("format", grammar) if grammar is not None else ("tools", tools)
    if found[1] is not None:
        refuse_if_disabled(found[1], service.settings.disable_grammar_support, found[0])
        return replace(params, grammar=found[1], adapter_id=adapter), found[0]
    return replace(params, adapter_id=adapter), None


async def _chat_prompt(service: InferenceService, req: ChatRequest) -> list[Reply]:
    adapter = _checked(service, req)  # inside the admitted request: a refusal counts in the metrics
    settings, template = service.settings, service.engine.tokenizer.chat_template
    parsers = resolve(settings.reasoning_parser, settings.tool_call_parser, template)
    messages, kwargs, plan = inputs.prompt_messages(
        req, template, parsers.reasoning is not None, settings.trust_request_chat_template
    )
    plan = own_format_tools(parsers, plan)
    params, grammar_field = _params(service, req, plan, adapter)
    ids, images, parsers, params = await render_prompt(service, messages, kwargs, parsers, params)
    return [Reply(ids, params, grammar_field, images=images, tools=plan, parsers=parsers)]


async def _generate_prompt(service: InferenceService, req: GenerateRequest) -> list[Reply]:
    adapter = _checked(service, req)  # inside the admitted request: a refusal counts in the metrics
    settings, template = service.settings, service.engine.tokenizer.chat_template
    if req.raw:  # the prompt as it is, tokenized as TGI's /generate tokenizes its `inputs`
        if req.think not in (None, False):
            raise unsupported("think", "is not read with `raw: true`: a raw prompt has no template")
        params, grammar_field = _params(service, req, None, adapter)
        parsers = resolve(settings.reasoning_parser, None, template)
        ids = await service.encode(req.prompt)
        parsers, params = await reasoning_of(service, req.prompt, parsers, params, continued=True)
        return [Reply(ids, params, grammar_field, parsers=parsers)]
    parsers = resolve(settings.reasoning_parser, None, template)
    kwargs = inputs.template_kwargs(req, parsers.reasoning is not None, settings.trust_request_chat_template)
    params, grammar_field = _params(service, req, None, adapter)
    messages = inputs.generate_messages(req)
    ids, images, parsers, params = await render_prompt(service, messages, kwargs, parsers, params)
    return [Reply(ids, params, grammar_field, images=images, parsers=parsers)]


async def _reply(
    request: Request, req: GenerationFields, prompt: Callable[[], Awaitable[list[Reply]]], chat: bool
) -> Response:
    """The one path of `/api/generate` and `/api/chat`: the service's generation, streamed as NDJSON
    lines or merged into one body (`ReplyWriter`); an error once a stream has started is its last line."""
    started = time.perf_counter_ns()
    service = _service(request)
    tracker = service.admit(1, "this request")
    generation: Generation[Reply] = await service.generate(request, tracker, prompt(), stream=True)
    reply = generation.inputs[0]
    writer = ReplyWriter(req.model, len(reply.prompt_token_ids), started, chat, reply.tools, reply.parsers)

    async def lines() -> AsyncIterator[bytes]:
        async for _, event in generation.events():
            for line in writer.feed(event):
                yield ndjson(line)

    path = request.url.path
    if req.stream:
        body = generation.body(lines(), path, ndjson_error)
        headers = {"content-type": NDJSON}
        return sse.EventStreamResponse(body, service.settings.stream_write_timeout_s, headers=headers)
    failures: list[ApiError] = []
    body = generation.body(lines(), path, lambda exc: failures.append(exc) or b"")

    async def drained() -> None:
        async for _ in body:
            pass

    await sse.cancel_on_disconnect(request, drained())
    if failures:
        return failures[0].response(path)
    return JSONResponse(writer.whole())


@router.post("/api/generate")
async def generate(req: GenerateRequest, request: Request) -> Response:
    """Ollama's completion of a prompt (the chat template around it, unless `raw`)."""
    service = _service(request)
    if not req.prompt and not req.images:  # Ollama's "load the model": it is loaded
        _checked(service, req)
        return JSONResponse(load_response(req.model, chat=False))
    return await _reply(request, req, lambda: _generate_prompt(service, req), chat=False)


@router.post("/api/chat")
async def chat(req: ChatRequest, request: Request) -> Response:
    """Ollama's chat (the model's chat template; `tools` through the grammar-backed tool calling)."""
    service = _service(request)
    if not req.messages:  # Ollama's "load the model": it is loaded
        _checked(service, req)
        return JSONResponse(load_response(req.model, chat=True))
    return await _reply(request, req, lambda: _chat_prompt(service, req), chat=True)


@router.get("/api/tags")
async def tags(request: Request) -> dict:
    """The models served (and their LoRA adapters)."""
    return {"models": await models.every_listed(_service(request))}


async def _entry(service: InferenceService, model: str) -> dict:
    adapter = inputs.served_model(service, model)
    listed = await models.listed(service)
    return next(e for e in listed if e["name"] == inputs.tagged(adapter or service.model_name))


@router.post("/api/show")
async def show(req: ShowRequest, request: Request) -> dict:
    """The served model's details, chat template, information and capabilities."""
    service = _service(request)
    check_fields(req)
    entry = await _entry(service, req.model or req.name or "")
    return await models.show(service, entry)


@router.get("/api/ps")
async def ps(request: Request) -> dict:
    """The models loaded: the one model, always; on a server of several, those loaded now."""
    return {"models": await models.every_running(_service(request))}


@router.get("/api/version")
async def version() -> dict:
    """This server's version (tgi's: it is no Ollama)."""
    return {"version": __version__}


_STORE = (
    "this server serves the models named at its launch (`--model-id`, `--models-dir`) and changes no model "
    "store over HTTP: pull, list and delete models in the Hugging Face cache with `tgi models pull|list|rm "
    "NAME` on the host"
)


def _not_served(why: str):
    async def refuse(request: Request) -> Response:
        raise ApiError(501, f"`{request.url.path}` is not served: {why}", "not_served")

    return refuse


for _path, _methods in (
    ("/api/pull", ["POST"]),
    ("/api/push", ["POST"]),
    ("/api/create", ["POST"]),
    ("/api/copy", ["POST"]),
    ("/api/delete", ["DELETE"]),
    ("/api/blobs/{digest}", ["HEAD", "POST"]),
):
    router.add_api_route(_path, _not_served(_STORE), methods=_methods, include_in_schema=False)
