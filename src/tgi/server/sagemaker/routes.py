"""SageMaker's routes, as TGI serves them: `/invocations` (SageMaker's one route, dispatched by the body's
shape to TGI's or OpenAI's API) and `/ping` (SageMaker's health check)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from tgi.server.http.errors import validation_error
from tgi.server.openai.routes import respond
from tgi.server.openai.schemas import ChatCompletionRequest, CompletionRequest
from tgi.server.tgi.routes import compat_generate, health
from tgi.server.tgi.schemas import CompatGenerateRequest, ErrorResponse

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
        return await respond(request, _parse(ChatCompletionRequest, body), chat=True)
    if "prompt" in body:
        return await respond(request, _parse(CompletionRequest, body), chat=False)
    return await compat_generate(_parse(CompatGenerateRequest, body), request)


@router.get("/ping", responses={503: {"model": ErrorResponse}})
async def ping(request: Request) -> Response:
    """SageMaker's health check: `/health`'s answer (no auth needed)."""
    return await health(request)
