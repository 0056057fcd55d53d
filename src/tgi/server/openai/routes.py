"""OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from tgi.core.request import TokenEvent
from tgi.core.sampling_params import SamplingParams
from tgi.server.chat.output import ChatOutputStream, chat_message, output_text, piece_of, reasoning_tokens
from tgi.server.chat.parsers import (
    OutputParsers,
    own_format_tools,
    render_prompt,
    resolve,
)
from tgi.server.chat.tools import CallStream, ToolPlan, message_for, plan_tools, render_inputs
from tgi.server.http import sse
from tgi.server.http.errors import OpenAIErrorResponse, validation_error
from tgi.server.lora.adapters import model_list, openai_adapter
from tgi.server.openai import format as fmt
from tgi.server.openai.parameters import beam_search_of, openai_sampling_params
from tgi.server.openai.prediction import prediction_counts, prediction_tokens, prediction_usage
from tgi.server.openai.prompt_details import chat_echo, prompt_logprobs_body, with_prompt_logprobs
from tgi.server.openai.schemas import ChatCompletionRequest, CompletionRequest
from tgi.server.service.generation import Generation, SequenceInput, visible_text
from tgi.server.service.inference import InferenceService
from tgi.server.validation.fields import check_fields
from tgi.server.validation.grammars import (
    one_grammar,
    refuse_if_disabled,
    response_format_grammar,
    structured_outputs_grammar,
    vllm_guided_grammar,
)
from tgi.server.validation.sampling import check_prompt_logprobs, truncated
from tgi.server.validation.sampling_fields import with_token_lists

router = APIRouter(tags=["OpenAI"])


@dataclass(frozen=True, kw_only=True)
class Prompt(SequenceInput):
    """One prompt of the request with its `n` choices, and how to show them. The choices of prompt p are
    `choices[p * n : (p + 1) * n]`: a choice's index is its engine sequence's (`Generation.requests`)."""

    tools: ToolPlan | None = None  # chat with `tools`: how to read the output back
    parsers: OutputParsers = field(
        default_factory=OutputParsers
    )  # chat: the reasoning and tool-call parsers it goes through
    # `echo`: completions', the prompt's text; chat's, the last message's content: shown before the output
    echo: str | None = None
    as_ids: bool = False  # vLLM's `return_tokens_as_token_ids`: logprobs name tokens `token_id:<id>`


def _service(request: Request) -> InferenceService:
    return request.app.state.service


def _with_grammar(
    service: InferenceService, req, base: SamplingParams, tools: ToolPlan | None = None
) -> tuple[SamplingParams, str | None]:
    """`base` constrained by the one grammar the request asks for, and the field that asks for it (the
    engine's validation compiles it)."""
    asked = one_grammar(
        ("response_format", response_format_grammar(req.response_format)),
        ("tools", tools.grammar if tools is not None else None),
        vllm_guided_grammar(req),
        structured_outputs_grammar(req.structured_outputs),
    )
    if asked is None:
        return base, None
    field, grammar = asked
    refuse_if_disabled(grammar, service.settings.disable_grammar_support, field)
    return replace(base, grammar=grammar), field


async def _chat_prompts(service: InferenceService, req: ChatCompletionRequest) -> list[Prompt]:
    top_n = req.top_logprobs or 0
    if top_n and not req.logprobs:
        raise validation_error("`top_logprobs` requires `logprobs` to be true")
    base = openai_sampling_params(req, service.settings, top_n=top_n, logprobs=req.logprobs)
    base = with_prompt_logprobs(req, base, service.settings)
    base = await with_token_lists(service, req, base)
    base = replace(base, adapter_id=openai_adapter(service, req.model))
    tools = plan_tools(req.tools, req.tool_choice)
    template = service.engine.tokenizer.chat_template
    parsers = resolve(service.settings.reasoning_parser, service.settings.tool_call_parser, template)
    tools = own_format_tools(parsers, tools)
    base, field = _with_grammar(service, req, base, tools)
    options = req.template_options(service.settings.trust_request_chat_template)
    shown_template = options.chat_template or template
    messages, template_kwargs = render_inputs(req.template_messages(), tools, shown_template, req.tool_prompt)
    template_kwargs = {**template_kwargs, **options.kwargs()}
    ids, images, parsers, base = await render_prompt(service, messages, template_kwargs, parsers, base)
    ids = _truncated(service, ids, req, bool(images))
    salt = req.cache_salt
    as_ids = req.return_tokens_as_token_ids
    predicted = await prediction_tokens(service, req.prediction)
    beam = beam_search_of(req, base, field, req.stream, bool(predicted))
    return [
        Prompt(
            ids,
            base,
            field,
            req.n,
            images=images,
            tools=tools,
            parsers=parsers,
            cache_salt=salt,
            as_ids=as_ids,
            echo=chat_echo(req),
            prediction=predicted,
            beam=beam,
        )
    ]


def _truncated(service: InferenceService, ids: list[int], req, images: bool = False) -> list[int]:
    """vLLM's `truncate_prompt_tokens`: the prompt's last tokens (the chat template applied)."""
    limit = service.engine.config.max_input_tokens
    return truncated(ids, req.truncate_prompt_tokens, "truncate_prompt_tokens", limit, images)


async def _completion_prompts(service: InferenceService, req: CompletionRequest) -> list[Prompt]:
    if req.suffix:
        raise validation_error("`suffix` is not supported", "suffix")
    top_n = req.logprobs or 0
    base = openai_sampling_params(req, service.settings, top_n=top_n, logprobs=req.logprobs is not None)
    base = with_prompt_logprobs(req, base, service.settings)
    base = await with_token_lists(service, req, base)
    base = replace(base, adapter_id=openai_adapter(service, req.model))
    if req.echo and req.logprobs is not None:  # the prompt tokens' logprobs come before the output's
        if req.stream:
            raise validation_error("`echo` with `logprobs` is not supported when streaming", "echo")
        check_prompt_logprobs("echo", service.settings)
        base = replace(base, prompt_logprobs=True)
    base, field = _with_grammar(service, req, base)
    beam = beam_search_of(req, base, field, req.stream, prediction=False)
    prompts = req.prompts()
    if not prompts:
        raise validation_error("`prompt` cannot be empty")
    out: list[Prompt] = []
    for prompt in prompts:
        ids = _truncated(service, prompt if isinstance(prompt, list) else await service.encode(prompt), req)
        echo = None
        if req.echo:
            cut = isinstance(prompt, list) or req.truncate_prompt_tokens is not None  # echo what was run
            echo = await service.decode(ids) if cut else prompt
        as_ids = req.return_tokens_as_token_ids
        out.append(
            Prompt(ids, base, field, req.n, echo=echo, cache_salt=req.cache_salt, as_ids=as_ids, beam=beam)
        )
    return out


def _usage(
    generation: Generation[Prompt],
    generated: dict[int, int],
    cached: dict[int, int],
    pieces: dict[int, list[str]],
    predicted: dict[int, tuple[int, int]],
) -> dict:
    """Usage over the choices: `generated` and `cached` (prompt tokens read from the prefix cache) by choice
    index. A prompt counts once; its cached tokens are the fewest any of its choices read. With a reasoning
    parser, `completion_tokens_details.reasoning_tokens` counts the tokens that went to the reasoning
    (`pieces`: each choice's token texts, as the parsers read them); with a `prediction`, its accepted and
    rejected tokens (`predicted`: each choice's, `tgi.server.openai.prediction`)."""
    prompt_tokens = sum(len(p.prompt_token_ids) for p in generation.inputs)
    cached_per_prompt: dict[int, int] = {}
    for index, p in enumerate(generation.owners):
        least = cached_per_prompt.get(p, cached.get(index, 0))
        cached_per_prompt[p] = min(least, cached.get(index, 0))
    out = fmt.usage(prompt_tokens, sum(generated.values()), sum(cached_per_prompt.values()))
    if any(p.parsers.reasoning is not None for p in generation.inputs):
        reasoned = sum(reasoning_tokens(pieces.get(i, []), generation.input_of(i).parsers) for i in generated)
        out["completion_tokens_details"] = {"reasoning_tokens": reasoned}
    if any(p.prediction for p in generation.inputs):
        out.setdefault("completion_tokens_details", {}).update(prediction_usage(predicted.values()))
    return out


def _pieces(prompt: Prompt, events: list[TokenEvent]) -> list[str]:
    """A choice's token texts as its parsers read them (empty without a reasoning parser: nothing counts)."""
    if prompt.parsers.reasoning is None:
        return []
    return [piece_of(e, prompt.parsers, prompt.tools) for e in events]


def _chat_choice(index: int, prompt: Prompt, events: list[TokenEvent], logprobs: bool) -> dict:
    final = events[-1]
    if prompt.parsers.active:
        text = output_text(events, prompt.parsers, prompt.tools)
        message, called = chat_message(text, prompt.parsers, prompt.tools)
    else:
        message, called = message_for(final.generated_text or "", prompt.tools)
    if prompt.echo is not None:
        message = {**message, "content": prompt.echo + (message.get("content") or "")}
    return {
        "index": index,
        "message": message,
        "logprobs": {"content": [fmt.chat_logprob(e, prompt.as_ids) for e in events]} if logprobs else None,
        "finish_reason": fmt.finish_reason(final.finish_reason, called),
    }


def _completion_choice(index: int, prompt: Prompt, events: list[TokenEvent], logprobs: bool) -> dict:
    final = events[-1]
    echo = prompt.echo or ""
    out = None
    if logprobs:
        out = fmt.completion_logprobs(events, start_offset=len(echo), as_ids=prompt.as_ids)
        if prompt.echo is not None:
            out = fmt.with_prompt_logprobs(final.prompt_tokens or (), out, prompt.as_ids)
    return {
        "index": index,
        "text": echo + (final.generated_text or ""),
        "logprobs": out,
        "finish_reason": fmt.finish_reason(final.finish_reason),
        **_prompt_logprobs(prompt, final),
    }


def _prompt_logprobs(prompt: Prompt, final: TokenEvent) -> dict:
    """vLLM's `prompt_logprobs` (a choice's field on completions, the response's on chat), when asked."""
    if prompt.params.prompt_top_n_tokens is None:
        return {}
    return {"prompt_logprobs": prompt_logprobs_body(final.prompt_tokens or (), prompt.as_ids)}


def _chat_chunker(generation: Generation[Prompt]):
    """The chunks of each chat event: one per delta (a tool call's header and its arguments go in separate
    chunks, as OpenAI sends them); nothing for a token that adds nothing yet (a call's held-back brace)."""
    calls: dict[int, CallStream | ChatOutputStream] = {}
    for index in range(len(generation.requests)):
        given = generation.input_of(index)
        if given.parsers.active:
            calls[index] = ChatOutputStream(given.parsers, given.tools)
        elif given.tools is not None and given.tools.may_call:
            calls[index] = CallStream(given.tools)

    def chunks(index: int, prompt: Prompt, event: TokenEvent, logprobs: bool) -> list[dict]:
        stream = calls.get(index)
        last = event.finish_reason is not None
        if stream is None:
            deltas = [{"role": "assistant", "content": visible_text(event)}]
        else:
            piece = piece_of(event, prompt.parsers, prompt.tools)
            deltas = stream.feed(piece, last) or ([{}] if last or logprobs else [])
            deltas = [{"role": "assistant", **d} for d in deltas]
        if event.index == 0 and prompt.echo:  # vLLM's chat `echo`: the last message's content first
            deltas = [{"role": "assistant", "content": prompt.echo}, *deltas]
        out = [{"index": index, "delta": d, "logprobs": None, "finish_reason": None} for d in deltas]
        if out and logprobs:
            out[-1]["logprobs"] = {"content": [fmt.chat_logprob(event, prompt.as_ids)]}
        if out:
            out[-1]["finish_reason"] = fmt.finish_reason(
                event.finish_reason, stream is not None and stream.is_call
            )
        return out

    return chunks


def _completion_chunk(index: int, prompt: Prompt, event: TokenEvent, logprobs: bool) -> list[dict]:
    # `echo`: the prompt goes first, in a chunk of its own (streamed echo takes no `logprobs`)
    echo = [] if event.index or prompt.echo is None else [_echo_chunk(index, prompt)]
    return [
        *echo,
        {
            "index": index,
            "text": visible_text(event),
            "logprobs": fmt.completion_logprobs([event], as_ids=prompt.as_ids) if logprobs else None,
            "finish_reason": fmt.finish_reason(event.finish_reason),
        },
    ]


def _echo_chunk(index: int, prompt: Prompt) -> dict:
    return {"index": index, "text": prompt.echo, "logprobs": None, "finish_reason": None}


def _fan_out(req, chat: bool) -> tuple[int, str, str]:
    """The engine sequences a request asks for (`n` per prompt), and how to name them in a refusal."""
    n = max(req.n, 1)  # `n` < 1 gets its own 422 once admitted
    if chat:
        return n, "`n`", "n"
    prompts = len(req.prompts())
    return prompts * n, f"`prompt` ({prompts} prompts) x `n` ({n})", "prompt" if prompts > 1 else "n"


async def respond(request: Request, req, chat: bool) -> Response:
    service = _service(request)
    logprobs = bool(req.logprobs) if chat else req.logprobs is not None
    env = fmt.Envelope(
        "chatcmpl" if chat else "cmpl", "chat.completion" if chat else "text_completion", service.model_name
    )
    tracker = service.admit(*_fan_out(req, chat))
    generation = await service.generate(request, tracker, _prompts(service, req, chat), stream=req.stream)
    env.model = generation.inputs[0].params.adapter_id or env.model  # a LoRA adapter answers under its id
    if not req.stream:
        results = generation.results
        build = _chat_choice if chat else _completion_choice
        choices = [build(i, generation.input_of(i), events, logprobs) for i, events in enumerate(results)]
        generated = {i: len(events) for i, events in enumerate(results)}
        cached = {i: events[-1].num_cached_tokens for i, events in enumerate(results)}
        pieces = {i: _pieces(generation.input_of(i), events) for i, events in enumerate(results)}
        predicted = {i: prediction_counts(events[-1]) for i, events in enumerate(results)}
        body = env.body(choices, _usage(generation, generated, cached, pieces, predicted))
        if chat:  # one prompt: its logprobs are the response's
            body.update(_prompt_logprobs(generation.input_of(0), results[0][-1]))
        return JSONResponse(body)
    env.object = "chat.completion.chunk" if chat else "text_completion"
    chunk = _chat_chunker(generation) if chat else _completion_chunk
    chunks = _chunks(env, generation, chunk, logprobs, req.include_usage)
    # after the headers, an error is the last event (OpenAI's shape)
    return sse.EventStreamResponse(
        generation.body(chunks, request.url.path), service.settings.stream_write_timeout_s
    )


async def _prompts(service: InferenceService, req, chat: bool) -> list[Prompt]:
    check_fields(req)
    return await (_chat_prompts(service, req) if chat else _completion_prompts(service, req))


async def _chunks(
    env, generation: Generation[Prompt], chunk, logprobs: bool, include_usage: bool
) -> AsyncIterator[bytes]:
    generated = dict.fromkeys(range(len(generation.requests)), 0)
    cached: dict[int, int] = {}
    predicted: dict[int, tuple[int, int]] = {}
    pieces: dict[int, list[str]] = {}  # each choice's token texts, for the count of reasoning tokens
    async for i, event in generation.events():
        generated[i] = event.index + 1
        if event.finish_reason is not None:
            cached[i], predicted[i] = event.num_cached_tokens, prediction_counts(event)
        pieces.setdefault(i, []).extend(_pieces(generation.input_of(i), [event]))
        for choice in chunk(i, generation.input_of(i), event, logprobs):
            yield sse.event(env.body([choice]))
    if include_usage:
        yield sse.event(env.body([], _usage(generation, generated, cached, pieces, predicted)))
    yield sse.DONE


_ERRORS = {code: {"model": OpenAIErrorResponse} for code in (422, 429, 500)}


@router.post("/v1/chat/completions", responses=_ERRORS)
async def chat_completions(req: ChatCompletionRequest, request: Request) -> Response:
    """OpenAI chat completions (the tokenizer's chat template; streamed with `stream: true`)."""
    return await respond(request, req, chat=True)


@router.post("/v1/completions", responses=_ERRORS)
async def completions(req: CompletionRequest, request: Request) -> Response:
    """OpenAI completions (a prompt string, a list of them, or token ids)."""
    return await respond(request, req, chat=False)


@router.get("/v1/models")
async def models(request: Request) -> dict:
    """The served model and its LoRA adapters, as OpenAI's model list."""
    return {"object": "list", "data": model_list(_service(request))}
