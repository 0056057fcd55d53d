"""TGI's `/chat_tokenize`: a chat request's prompt as the model gets it (the chat template applied and
tokenized, without generating). It reads OpenAI's chat request, as TGI's does (the one import of another
API's package from this one, allowed by name in the import contracts)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tgi.server.chat.tools import plan_tools, render_inputs
from tgi.server.images.sources import split_images
from tgi.server.openai.schemas import ChatCompletionRequest
from tgi.server.service.inference import InferenceService
from tgi.server.tgi.schemas import ErrorResponse
from tgi.server.validation.fields import check_fields

router = APIRouter(tags=["Text Generation Inference"])

_ERRORS = {code: {"model": ErrorResponse} for code in (422, 429, 500)}


@router.post("/chat_tokenize", responses=_ERRORS)
async def chat_tokenize(req: ChatCompletionRequest, request: Request) -> Response:
    """The chat request's prompt as the model gets it: `templated_text` (the chat template applied as the
    request asks, `tgi.server.chat.template`, with the tools where the request has them) and its tokens with
    their character offsets in it (at most `max_input_tokens` tokens, else a 422)."""
    service: InferenceService = request.app.state.service
    with service.admit(metered=False):  # a slot, but not a generation request in the metrics
        check_fields(req)
        tools = plan_tools(req.tools, req.tool_choice)
        options = req.template_options(service.settings.trust_request_chat_template)
        template = options.chat_template or service.engine.tokenizer.chat_template
        messages, kwargs = render_inputs(req.template_messages(), tools, template, req.tool_prompt)
        kwargs = {**kwargs, **options.kwargs()}
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
