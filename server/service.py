"""What every route shares: admission (429), tokenisation off the event loop, engine streams with metrics."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar, copy_context
from dataclasses import replace
from typing import Any, TypeVar

from tgi.core.guided import CompilerBusyError, Grammar
from tgi.core.request import EngineError, FinishReason, TokenEvent, ValidationError
from tgi.core.sampling_params import SamplingParams
from tgi.core.validation import too_many_input_tokens
from tgi.server.errors import ApiError, internal_error, overloaded, validation_error
from tgi.server.metrics import ServerMetrics
from tgi.server.protocol import ServingEngine
from tgi.server.settings import ServerSettings

T = TypeVar("T")

# The engine a request was admitted on: it tokenizes and generates there even when the served model is
# swapped meanwhile (`InferenceService.switch_engine`). Set by `admit()` in the request's own task.
# Weakly: a context outlives its request where the event loop keeps a cancelled timer of it until its time
# comes, and must not keep a swapped-out model alive meanwhile; the request's `RequestTracker` holds it.
_PINNED: ContextVar[weakref.ref[ServingEngine] | None] = ContextVar("tgi_pinned_engine", default=None)


class RequestTracker:
    """One admitted HTTP request: holds its concurrency slots (one per engine sequence) until `finish()`
    and counts the outcome once."""

    def __init__(self, service: InferenceService, slots: int, metered: bool) -> None:
        self._service = service
        self._slots = slots
        self._metered = metered
        self._done = False
        self.started = time.perf_counter()
        self.engine = service.current_engine  # pinned: the request runs there to its end
        service.users[id(self.engine)] = service.users.get(id(self.engine), 0) + 1
        _PINNED.set(weakref.ref(self.engine))

    def finish(self, exc: BaseException | None = None) -> None:
        if self._done:
            return
        self._done = True
        self._service.in_flight -= self._slots
        self._service.users[id(self.engine)] -= 1
        if not self._metered:
            return
        metrics = self._service.metrics
        if exc is None:
            metrics.request_succeeded(time.perf_counter() - self.started)
        elif isinstance(exc, ApiError):
            metrics.request_failed(exc.error_type)
        elif isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            metrics.request_failed("cancelled")
        else:
            metrics.request_failed("generation")

    def __enter__(self) -> RequestTracker:
        return self

    def __exit__(self, _type: Any, exc: BaseException | None, _tb: Any) -> None:
        self.finish(exc)


class InferenceService:
    def __init__(self, engine: ServingEngine, settings: ServerSettings) -> None:
        self.current_engine = engine  # where newly admitted requests go (`switch_engine` changes it)
        self.users: dict[int, int] = {}  # id(engine) -> admitted requests not finished
        self.settings = settings
        self.in_flight = 0
        self.metrics = ServerMetrics(lambda: self.current_engine.stats(), lambda: self.in_flight)
        self._workers = ThreadPoolExecutor(settings.validation_workers, thread_name_prefix="tgi-validation")
        self.tracing = None  # `tgi.server.tracing.Tracing` when --otlp-endpoint is set (create_app)

    @property
    def engine(self) -> ServingEngine:
        """The engine of the current request (pinned at admission), else the one serving now."""
        pinned = _PINNED.get()
        return (pinned() if pinned is not None else None) or self.current_engine

    def switch_engine(self, engine: ServingEngine) -> ServingEngine:
        """Send requests admitted from now on to `engine`; those admitted before stay on the previous one,
        which is returned (`users[id(previous)]` counts them down)."""
        previous, self.current_engine = self.current_engine, engine
        return previous

    @property
    def model_name(self) -> str:
        return self.settings.model_id or self.engine.model_id

    @property
    def config(self):
        return self.engine.config

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def admit(
        self,
        sequences: int = 1,
        what: str = "this request",
        param: str | None = None,
        metered: bool = True,
    ) -> RequestTracker:
        """Take one concurrency slot per engine sequence the request asks for (`n` x prompts, `best_of`)
        without waiting (TGI's `try_acquire`). More sequences than `--max-client-batch-size` is a 422 naming
        `param`; too few free slots, a 429. `metered=False`: not counted as a generation request."""
        metrics = self.metrics if metered else None
        if metrics:
            metrics.request_received()
        limit = self.settings.max_client_batch_size
        refusal = None
        if sequences > limit:
            refusal = validation_error(
                f"{what} asks for {sequences} sequences; --max-client-batch-size allows {limit}", param
            )
        elif self.in_flight + sequences > self.settings.max_concurrent_requests:
            refusal = overloaded()
        if refusal is not None:
            if metrics:
                metrics.request_failed(refusal.error_type)
            raise refusal
        self.in_flight += sequences
        return RequestTracker(self, sequences, metered)

    # Tokenisation and templating run on the `--validation-workers` threads: a long prompt never stalls the
    # event loop, and no more than that many requests tokenize at once (TGI's validation workers).
    # The work runs in a copy of the request's context, so that `self.engine` there is the engine the
    # request was admitted on (its tokenizer and limits) even when the model is swapped meanwhile.
    async def _tokenizing(self, fn: Callable[[], T]) -> T:
        context = copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._workers, context.run, fn)

    async def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return await self._tokenizing(lambda: self._encode(text, add_special_tokens))

    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    async def decode(self, token_ids: list[int]) -> str:
        return await self._tokenizing(lambda: self.tokenizer.decode(token_ids))

    async def token_spans_json(
        self,
        text: str,
        add_special_tokens: bool = True,
        shape: Callable[[list[dict]], Any] = lambda spans: spans,
    ) -> bytes:
        """`text`'s tokens as TGI's `/tokenize` lists them (`{id, text, start, stop}`, the characters each
        covers), passed through `shape` and serialised to JSON, all on the validation workers: however long
        the text, the event loop only awaits. More tokens than `--max-input-tokens` is a 422 naming the
        limit (TGI's message for an input too long to generate from)."""
        tokenizer, limit = self.tokenizer, self.config.max_input_tokens

        def run() -> bytes:
            enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=add_special_tokens)
            ids = enc["input_ids"]
            if len(ids) > limit:
                raise validation_error(too_many_input_tokens(len(ids), limit))
            spans = [
                {"id": i, "text": text[a:b], "start": a, "stop": b}
                for i, (a, b) in zip(ids, enc["offset_mapping"], strict=True)
            ]
            return json.dumps(shape(spans), ensure_ascii=False).encode()

        return await self._tokenizing(run)

    def _template(self, messages: list[dict], template_kwargs: dict[str, Any]) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ApiError(422, "This model has no chat template", "template_error")
        try:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **template_kwargs
            )
        except Exception as exc:  # jinja errors (raise_exception in templates) are the client's
            raise ApiError(422, f"Template error: {exc}", "template_error") from None

    async def template_text(self, messages: list[dict], **template_kwargs: Any) -> str:
        """The chat template applied to `messages` (with the generation prompt), as text."""
        return await self._tokenizing(lambda: self._template(messages, template_kwargs))

    async def render_chat(self, messages: list[dict], **template_kwargs: Any) -> list[int]:
        # The template already writes BOS where the model wants one.
        return await self._tokenizing(
            lambda: self._encode(self._template(messages, template_kwargs), add_special_tokens=False)
        )

    async def with_grammar(
        self, params: SamplingParams, grammar: Grammar, field: str | None = None
    ) -> SamplingParams:
        """`params` constrained by `grammar`, compiled (or found cached) for the request's engine in a worker
        thread: an expensive grammar never stalls the event loop, and the request carries it compiled, so
        that the engine thread never compiles. A grammar that cannot be used is a 422 naming `field`; one
        that cannot be compiled now (the compile queue is full), a 503 that says so."""
        try:
            compiled = await asyncio.to_thread(self.engine.compile_grammar, grammar)
        except ValidationError as exc:
            raise validation_error(str(exc), field) from None
        except CompilerBusyError as exc:
            raise ApiError(503, f"Grammar compilation is busy: {exc}", "overloaded") from None
        return replace(params, grammar=grammar, compiled_grammar=compiled)

    async def stream(self, token_ids: list[int], params: SamplingParams) -> AsyncIterator[TokenEvent]:
        """The engine's stream with its errors as `ApiError`; closing this closes (cancels) the engine's."""
        traced = self.tracing.sequence(token_ids, params) if self.tracing is not None else None
        try:
            events = self.engine.stream(token_ids, params, request_id=uuid.uuid4().hex)
        except Exception as exc:
            raise _api_error(exc) from exc
        try:
            while True:
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    return
                except (ValidationError, EngineError) as exc:
                    raise _api_error(exc) from exc
                if event.finish_reason is FinishReason.CANCELLED:
                    raise ApiError(500, "Request was cancelled by the server", "generation")
                if event.finish_reason is not None:
                    self.metrics.sequence_finished(event)
                if traced is not None:
                    traced.token(event)
                yield event
        finally:
            if traced is not None:
                traced.end()  # a sequence that failed or was cancelled (no-op after its last event)
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    async def collect(self, token_ids: list[int], params: SamplingParams) -> list[TokenEvent]:
        stream = self.stream(token_ids, params)
        try:
            return [event async for event in stream]
        finally:
            await stream.aclose()


def _api_error(exc: Exception) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ValidationError):
        return validation_error(str(exc))
    if isinstance(exc, EngineError):  # its message is written to be shown (no raw exception text)
        return ApiError(500, str(exc), "generation")
    return internal_error(exc)
