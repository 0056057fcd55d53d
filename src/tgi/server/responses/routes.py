"""OpenAI Responses: `POST /v1/responses` (streamed with `stream: true`), `GET` and `DELETE
/v1/responses/{id}` (the responses kept by `tgi.server.responses.store`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from tgi.core.sampling_params import SamplingParams
from tgi.server.chat.output import ChatOutputStream, chat_message, output_text, piece_of, reasoning_tokens
from tgi.server.chat.parsers import OutputParsers, own_format_tools, render_prompt, resolve
from tgi.server.chat.tools import CallStream, ToolPlan, message_for, render_inputs
from tgi.server.http import sse
from tgi.server.http.auth import tenant_of
from tgi.server.http.errors import ApiError, OpenAIErrorResponse, unsupported
from tgi.server.lora.adapters import openai_adapter
from tgi.server.responses import format as fmt
from tgi.server.responses import inputs as conv
from tgi.server.responses.events import ResponseEvents, frame
from tgi.server.responses.format import ResponseContext
from tgi.server.responses.schemas import ResponsesRequest
from tgi.server.responses.store import ResponsesStore
from tgi.server.service.generation import Generation, SequenceInput
from tgi.server.service.inference import InferenceService
from tgi.server.validation.fields import check_fields
from tgi.server.validation.grammars import refuse_if_disabled

router = APIRouter(tags=["OpenAI"])

#: GET /v1/responses/{id}'s query parameters and the values that ask for what it does (the stored body)
_RETRIEVE_NEUTRAL = {
    "stream": ("false",),
    "include_obfuscation": ("false",),
    "include": (),
    "starting_after": (),
}


@dataclass(frozen=True, kw_only=True)
class Turn(SequenceInput):
    """The prompt of one response, with what its answer needs: the tools to read a call back, what the
    response shows, and the conversation to store (its input without `instructions`)."""

    tools: ToolPlan | None
    parsers: OutputParsers  # the reasoning and tool-call parsers its output goes through
    context: ResponseContext
    conversation: list[dict] = field(default_factory=list)
    tenant: str | None = None  # who asks (`tgi.server.http.auth.tenant_of`): its response is stored as theirs
    continued: bool = False  # the output goes on with the conversation's last (assistant) message


def _store(request: Request) -> ResponsesStore:
    return request.app.state.responses_store


def _not_found(response_id: str) -> ApiError:
    return ApiError(404, f"Response with id '{response_id}' not found.", "not_found", param="response_id")


def _stores(req: ResponsesRequest, store: ResponsesStore) -> bool:
    """Whether this response is kept: `store` (OpenAI's default: true) where the server keeps any."""
    if store.enabled:
        return req.store is not False
    if req.store:
        raise unsupported(
            "store", "is not served: this server keeps no responses (--responses-store-max-entries 0)"
        )
    return False


def _history(req: ResponsesRequest, store: ResponsesStore, tenant: str | None) -> tuple[dict, ...]:
    if req.previous_response_id is None:
        return ()
    if not store.enabled:
        raise unsupported(
            "previous_response_id",
            "is not served: this server keeps no responses (--responses-store-max-entries 0)",
        )
    previous = store.get(req.previous_response_id, tenant)  # another tenant's: as if never stored
    if previous is None:
        raise ApiError(
            404,
            f"Previous response with id '{req.previous_response_id}' not found (never stored, deleted, or past "
            "the server's --responses-store-max-entries / --responses-store-max-age / "
            "--responses-store-max-bytes).",
            "not_found",
            param="previous_response_id",
        )
    return previous.conversation


def _params(req: ResponsesRequest) -> SamplingParams:
    """OpenAI's sampling: temperature 0 is greedy, else sampling at `temperature` (1 by default)."""
    greedy = req.temperature is not None and req.temperature == 0
    return SamplingParams(
        do_sample=not greedy,
        temperature=1.0 if greedy or req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        max_new_tokens=req.max_output_tokens,  # None: what is left of max_total_tokens
    )


async def _turns(
    service: InferenceService, store: ResponsesStore, req: ResponsesRequest, tenant: str | None
) -> list[Turn]:
    check_fields(req)
    context = ResponseContext(
        model=service.model_name,
        instructions=req.instructions,
        max_output_tokens=req.max_output_tokens,
        metadata=dict(req.metadata or {}),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        previous_response_id=req.previous_response_id,
        store=_stores(req, store),
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        text_format=conv.text_format(req),
        tool_choice=req.tool_choice if req.tool_choice is not None else "auto",
        tools=[t.model_dump(exclude_none=True) for t in req.tools or ()],
        user=req.user,
        safety_identifier=req.safety_identifier,
        reasoning_effort=req.reasoning.effort if req.reasoning is not None else None,
    )
    params = replace(_params(req), adapter_id=openai_adapter(service, req.model))
    context.model = params.adapter_id or context.model  # a LoRA adapter answers under its id
    messages = conv.conversation(req.items(), _history(req, store, tenant))
    template = service.engine.tokenizer.chat_template
    parsers = resolve(service.settings.reasoning_parser, service.settings.tool_call_parser, template)
    plan = conv.tool_plan(req)
    own = own_format_tools(parsers, plan)
    if own is not plan and req.parallel_tool_calls is False:
        raise unsupported(
            "parallel_tool_calls",
            "false is not served with --tool-call-parser and `tool_choice: auto`: the model writes its "
            "own calls, as many as it chooses",
        )
    plan = own
    grammar_field = None
    asked = conv.output_grammar(req, plan)
    if asked is not None:
        grammar_field, grammar = asked
        refuse_if_disabled(grammar, service.settings.disable_grammar_support, grammar_field)
        params = replace(params, grammar=grammar)
    options = conv.template_options(req)
    shown, template_kwargs = render_inputs(
        conv.with_instructions(messages, req.instructions), plan, template, None
    )
    template_kwargs = {**template_kwargs, **options.kwargs()}
    ids, images, parsers, params = await render_prompt(service, shown, template_kwargs, parsers, params)
    # the conversation is stored with the response, its image parts too (`_keep`)
    return [
        Turn(
            ids,
            params,
            grammar_field,
            images=images,
            tools=plan,
            parsers=parsers,
            context=context,
            conversation=messages,
            tenant=tenant,
            cache_salt=req.cache_salt,
            continued=options.continue_final_message,
        )
    ]


def _keep(store: ResponsesStore, turn: Turn, body: dict) -> None:
    if turn.context.store:
        reply, history = fmt.conversation_message(body["output"]), list(turn.conversation)
        if turn.continued:  # one assistant message: the one given, and what the output added to it
            given = history.pop()
            reply = {**given, **reply, "content": given["content"] + reply["content"]}
        store.put(body["id"], body, [*history, reply], turn.tenant)


def _whole(generation: Generation[Turn], store: ResponsesStore) -> dict:
    turn, events = generation.inputs[0], generation.results[0]
    final = events[-1]
    status = fmt.status_of(final.finish_reason)
    if turn.parsers.active:
        text = output_text(events, turn.parsers, turn.tools)
        message, _ = chat_message(text, turn.parsers, turn.tools)
    else:
        message, _ = message_for(final.generated_text or "", turn.tools)
    output = fmt.output_items(message, status)
    reasoned = reasoning_tokens([piece_of(e, turn.parsers, turn.tools) for e in events], turn.parsers)
    usage = fmt.usage(len(turn.prompt_token_ids), len(events), final.num_cached_tokens, reasoned)
    body = turn.context.body(status, output, usage)
    _keep(store, turn, body)
    return body


def _reader(turn: Turn) -> ChatOutputStream | CallStream | None:
    """What reads the streamed output into items: the output parsers (reasoning, the model's own calls),
    else the grammar-backed calls, else nothing (all of it is the message's text)."""
    if turn.parsers.active:
        return ChatOutputStream(turn.parsers, turn.tools)
    if turn.tools is not None and turn.tools.may_call:
        return CallStream(turn.tools)
    return None


def _failed(events: ResponseEvents) -> Callable[[ApiError], bytes]:
    """The end of a stream whose generation failed once it had begun: `response.failed` (OpenAI's way)."""

    def frames(exc: ApiError) -> bytes:
        return b"".join(frame(e) for e in events.fail(fmt.error_code(exc.status), exc.message))

    return frames


async def _events(
    generation: Generation[Turn], events: ResponseEvents, store: ResponsesStore
) -> AsyncIterator[bytes]:
    turn = generation.inputs[0]
    for event in events.start():
        yield frame(event)
    pieces: list[str] = []  # each token's text, for the count of reasoning tokens
    async for _, token in generation.events():
        last = token.finish_reason is not None
        pieces.append(piece_of(token, turn.parsers, turn.tools))
        for event in events.feed(pieces[-1], last):
            yield frame(event)
        if last:
            reasoned = reasoning_tokens(pieces, turn.parsers)
            usage = fmt.usage(len(turn.prompt_token_ids), token.index + 1, token.num_cached_tokens, reasoned)
            closing, body = events.finish(fmt.status_of(token.finish_reason), usage)
            _keep(store, turn, body)
            for event in closing:
                yield frame(event)


_ERRORS = {code: {"model": OpenAIErrorResponse} for code in (404, 422, 429, 500)}


@router.post("/v1/responses", responses=_ERRORS)
async def create_response(req: ResponsesRequest, request: Request) -> Response:
    """OpenAI Responses: `input` and `instructions` through the chat template, function tools, `text.format`,
    `previous_response_id` from the store; the typed event stream with `stream: true`."""
    service: InferenceService = request.app.state.service
    store = _store(request)
    tracker = service.admit()
    turns = _turns(service, store, req, tenant_of(request))
    generation = await service.generate(request, tracker, turns, stream=req.stream)
    if not req.stream:
        return JSONResponse(_whole(generation, store))
    # after the headers, an error ends the stream with `response.failed`
    events = ResponseEvents(generation.inputs[0].context, _reader(generation.inputs[0]))
    body = generation.body(_events(generation, events, store), request.url.path, _failed(events))
    return sse.EventStreamResponse(body, service.settings.stream_write_timeout_s)


def _check_retrieve_query(request: Request) -> None:
    for name, value in request.query_params.multi_items():
        if name in _RETRIEVE_NEUTRAL and value.lower() not in _RETRIEVE_NEUTRAL[name]:
            raise unsupported(name, "is not served: a stored response is returned whole, as JSON")


@router.get("/v1/responses/{response_id}", responses=_ERRORS)
async def retrieve_response(response_id: str, request: Request) -> dict:
    """A stored response, as it was returned."""
    _check_retrieve_query(request)
    stored = _store(request).get(response_id, tenant_of(request))  # another tenant's: a 404 as well
    if stored is None:
        raise _not_found(response_id)
    return stored.body


@router.delete("/v1/responses/{response_id}", responses=_ERRORS)
async def delete_response(response_id: str, request: Request) -> dict:
    """Forget a stored response (a continuation from it is then a 404)."""
    if not _store(request).delete(response_id, tenant_of(request)):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}
