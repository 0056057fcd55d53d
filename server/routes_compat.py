"""TGI's other routes: `/invocations` (SageMaker's one route, dispatched by the body's shape), `/ping`
(SageMaker's health check) and `/chat_tokenize` (the chat template applied and tokenized, without
generating)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from tgi.server.errors import validation_error
from tgi.server.fields import check_fields
from tgi.server.images.sources import split_images
from tgi.server.routes_openai import _respond
from tgi.server.routes_tgi import compat_generate, health
from tgi.server.schemas_openai import ChatCompletionRequest, CompletionRequest
from tgi.server.schemas_tgi import CompatGenerateRequest, ErrorResponse
from tgi.server.service import InferenceService
from tgi.server.tools import plan_tools, render_inputs

router = APIRouter(tags=["Text Generation Inference"])

_ERRORS = {code: {"model": ErrorResponse} for code in (422, 429, 500)}


def _parse(model: type[BaseModel], body: object) -> BaseModel:
    try:
        return model.model_validate(body)
    except PydanticValidationError as exc:  # the app's handler words it as every other 422
        raise RequestValidationError(exc.errors()) from None


@router.post("/invocations", responses=_ERRORS)
async def invocations(request: Request) -> Response:
    """SageMaker's route: a body with `messages` is a chat completion, one with `prompt` a completion
    (OpenAI's response shapes), any other TGI's `/` (`inputs`, `parameters`, `stream`)."""
    try:
        body = await request.json()
    except ValueError:
        raise validation_error("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise validation_error("the body must be a JSON object")
    if "messages" in body:
        return await _respond(request, _parse(ChatCompletionRequest, body), chat=True)
    if "prompt" in body:
        return await _respond(request, _parse(CompletionRequest, body), chat=False)
    return await compat_generate(_parse(CompatGenerateRequest, body), request)


@router.get("/ping", responses={503: {"model": ErrorResponse}})
async def ping(request: Request) -> Response:
    """SageMaker's health check: `/health`'s answer (no auth needed)."""
    return await health(request)


@router.post("/chat_tokenize", responses=_ERRORS)
async def chat_tokenize(req: ChatCompletionRequest, request: Request) -> Response:
    """The chat request's prompt as the model gets it: `templated_text` (the chat template applied, with
    the tools where the request has them) and its tokens with their character offsets in it (at most
    `max_input_tokens` tokens, else a 422)."""
    service: InferenceService = request.app.state.service
    with service.admit(metered=False):  # a slot, but not a generation request in the metrics
        check_fields(req)
        tools = plan_tools(req.tools, req.tool_choice)
        template = service.engine.tokenizer.chat_template
        messages, kwargs = render_inputs(req.template_messages(), tools, template, req.tool_prompt)
        messages, refs = split_images(messages)
        if refs:
            service.image_token(refs)  # refused before templating when the model takes no images
        text = await service.template_text(messages, **kwargs)
        prompt_ids = None
        if refs:  # the prompt's tokens as the model's processor expands its images
            prompt_ids = (await service.encode_with_images(text, refs, add_special_tokens=False))[0]
        # the template already writes BOS where the model wants one; built and serialised off the loop
        body = await service.token_spans_json(
            text,
            add_special_tokens=False,
            shape=lambda spans: {"tokenize_response": spans, "templated_text": text},
            prompt_ids=prompt_ids,
        )
    return Response(body, media_type="application/json")
