"""Anthropic's Messages API: `POST /v1/messages` (streamed with `stream: true`) and
`POST /v1/messages/count_tokens`. The request's fields are in `tgi.server.anthropic.schemas`, the prompt in
`tgi.server.anthropic.inputs`, the bodies in `tgi.server.anthropic.format`, the errors' shape in
`tgi.server.anthropic.errors`. The `anthropic-version` and `anthropic-beta` headers are accepted and change
nothing: a field a beta would enable is served or refused by name as any other."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from tgi.core.sampling_params import SamplingParams
from tgi.server.anthropic import format as fmt
from tgi.server.anthropic.inputs import check_thinking, prompt_messages, sampling_params
from tgi.server.anthropic.schemas import CountTokensRequest, MessagesRequest
from tgi.server.chat.parsers import OutputParsers, own_format_tools, render_prompt, resolve
from tgi.server.chat.tools import ToolPlan
from tgi.server.http import sse
from tgi.server.lora.adapters import openai_adapter
from tgi.server.service.generation import Generation, SequenceInput
from tgi.server.service.inference import InferenceService
from tgi.server.validation.fields import check_fields

router = APIRouter(tags=["Anthropic"])


@dataclass(frozen=True, kw_only=True)
class Conversation(SequenceInput):
    """The request's one prompt, and how to read its reply back."""

    tools: ToolPlan | None = None
    parsers: OutputParsers = field(default_factory=OutputParsers)  # the parsers its reply goes through


def _service(request: Request) -> InferenceService:
    return request.app.state.service


async def _conversation(service: InferenceService, req: MessagesRequest) -> list[Conversation]:
    check_fields(req)
    adapter = openai_adapter(service, req.model)
    settings, template = service.settings, service.engine.tokenizer.chat_template
    parsers = resolve(settings.reasoning_parser, settings.tool_call_parser, template)
    check_thinking(req.thinking, parsers.reasoning is not None)
    messages, template_kwargs, plan = prompt_messages(req, template, settings.trust_request_chat_template)
    plan = own_format_tools(parsers, plan)
    params, grammar_field = sampling_params(req, plan, settings)
    params = replace(params, adapter_id=adapter)
    ids, images, parsers, params = await render_prompt(service, messages, template_kwargs, parsers, params)
    return [Conversation(ids, params, grammar_field, images=images, tools=plan, parsers=parsers)]


def _whole(generation: Generation[Conversation], model: str, max_tokens: int) -> dict:
    [events] = generation.results
    final, prompt = events[-1], generation.inputs[0]
    blocks, called = fmt.content(events, prompt.tools, prompt.parsers)
    usage = fmt.usage(len(prompt.prompt_token_ids), len(events), final.num_cached_tokens)
    return fmt.message(model, blocks, fmt.stop_reason(final, max_tokens, called), usage)


async def _events(generation: Generation[Conversation], model: str, max_tokens: int) -> AsyncIterator[bytes]:
    prompt = generation.inputs[0]
    writer = fmt.EventWriter(model, len(prompt.prompt_token_ids), prompt.tools, max_tokens, prompt.parsers)
    for frame in writer.start():
        yield frame
    async for _, event in generation.events():
        for frame in writer.feed(event):
            yield frame


@router.post("/v1/messages")
async def messages(req: MessagesRequest, request: Request) -> Response:
    """Anthropic's Messages API (the tokenizer's chat template; streamed with `stream: true`)."""
    service = _service(request)
    tracker = service.admit(1, "this request")
    generation = await service.generate(request, tracker, _conversation(service, req), stream=req.stream)
    model = generation.inputs[0].params.adapter_id or service.model_name
    if not req.stream:
        return JSONResponse(_whole(generation, model, req.max_tokens))
    # after the headers, an error is the stream's last event (Anthropic's `error` event)
    body = generation.body(_events(generation, model, req.max_tokens), request.url.path)
    return sse.EventStreamResponse(body, service.settings.stream_write_timeout_s)


@router.post("/v1/messages/count_tokens")
async def count_tokens(req: CountTokensRequest, request: Request) -> dict:
    """The number of tokens of the prompt `/v1/messages` would build from the same fields, its images'
    tokens counted as the model's processor expands them."""
    service = _service(request)
    check_fields(req)
    openai_adapter(service, req.model)  # a model this server does not serve is a 404, as on /v1/messages
    settings, template = service.settings, service.engine.tokenizer.chat_template
    reasoning = resolve(settings.reasoning_parser, settings.tool_call_parser, template).reasoning
    check_thinking(req.thinking, reasoning is not None)
    messages, template_kwargs, _ = prompt_messages(req, template, settings.trust_request_chat_template)
    with service.admit(metered=False):  # a slot while its images are fetched and processed
        ids, *_ = await render_prompt(service, messages, template_kwargs, OutputParsers(), SamplingParams())
    return {"input_tokens": len(ids)}
