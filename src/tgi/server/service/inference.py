"""What every route shares: admission (429), tokenisation off the event loop, and the one path of a
generation request to the engine and back (`InferenceService.generate`), with its metrics and traces."""

from __future__ import annotations

import asyncio
import json
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import replace
from typing import Any, TypeVar

from starlette.requests import Request

from tgi.core.request import (
    EngineError,
    EngineRequest,
    FinishReason,
    ImageInput,
    TokenEvent,
    ValidationError,
)
from tgi.core.sampling_params import SamplingParams
from tgi.core.tokenization import count_tokens
from tgi.core.validation import too_many_input_tokens
from tgi.server.http import sse
from tgi.server.http.errors import ApiError, overloaded, validation_error
from tgi.server.images.decode import decode_image
from tgi.server.images.fetch import FETCH_WORKERS, MediaPolicy, images_fetched
from tgi.server.images.limits import ImageError, ImageLimits, check_count
from tgi.server.images.processor import ImagePreprocessor
from tgi.server.images.sources import ImageRef
from tgi.server.images.token_spans import aligned_spans
from tgi.server.observability.metrics import ServerMetrics
from tgi.server.served_models.pool import ModelPool
from tgi.server.served_models.selection import selected
from tgi.server.service.beam_search import searched
from tgi.server.service.engine_errors import api_error, validated
from tgi.server.service.generation import Generation, I, SequenceInput
from tgi.server.service.pooling import Embedding, EmbedRequest, embed
from tgi.server.service.pooling_routes import serves
from tgi.server.service.protocol import ServingEngine
from tgi.server.service.request_tracker import PINNED_ENGINE, RequestTracker
from tgi.server.service.settings import ServerSettings

T = TypeVar("T")


class InferenceService:
    def __init__(self, engine: ServingEngine, settings: ServerSettings) -> None:
        self.current_engine = engine  # where newly admitted requests go (`switch_engine` changes it)
        # several models (`--model-id` more than once): `tgi.server.served_models`; None: one
        self.pool: ModelPool | None = None
        self.users: dict[int, int] = {}  # id(engine) -> admitted requests not finished
        self.settings = settings
        self.in_flight = 0
        self.metrics = ServerMetrics(
            lambda: self.current_engine.stats(),
            lambda: self.in_flight,
            lambda: self.model_name,
            per_model=self._per_model_stats,
        )
        self._workers = ThreadPoolExecutor(settings.validation_workers, thread_name_prefix="tgi-validation")
        self._fetchers = ThreadPoolExecutor(FETCH_WORKERS, thread_name_prefix="tgi-image-fetch")
        self.tracing = (
            None  # `tgi.server.observability.tracing.Tracing` when --otlp-endpoint is set (create_app)
        )
        # each engine's image processor (None: a text-only model), loaded once: the start-up model's now
        self._preprocessors: dict[int, tuple[weakref.ref, ImagePreprocessor | None]] = {}
        self._preprocessor(engine)
        self.image_limits = ImageLimits(
            settings.max_images_per_request, settings.max_image_pixels, settings.payload_limit
        )
        self.media_policy = MediaPolicy(
            settings.allowed_media_domains,
            settings.allowed_local_media_path,
            settings.image_fetch_timeout_s,
            allowed_ports=settings.allowed_media_ports,
        )

    @property
    def engine(self) -> ServingEngine:
        """The engine of the current request (pinned at admission), else the one serving now."""
        pinned = PINNED_ENGINE.get()
        engine = pinned() if pinned is not None else None
        if engine is None and (chosen := selected()) is not None:
            engine = chosen.engine  # a server of several models: the one the request names
        return engine or self.current_engine

    def switch_engine(self, engine: ServingEngine) -> ServingEngine:
        """Send requests admitted from now on to `engine`; those admitted before stay on the previous one,
        which is returned (`users[id(previous)]` counts them down)."""
        previous, self.current_engine = self.current_engine, engine
        return previous

    def _per_model_stats(self) -> list[tuple[str, Any]] | None:
        """(name, stats) of each model loaded on a server of several (`/metrics`); None on a server of one."""
        if self.pool is None:
            return None
        return [(entry.name, entry.engine.stats()) for entry in self.pool.loaded()]

    @property
    def healthy(self) -> bool:
        """No engine has died: the one serving, or on a server of several each loaded one (none loaded, while
        one loads: healthy)."""
        if self.pool is not None:
            return all(engine.healthy for engine in self.pool.engines())
        return self.engine.healthy

    @property
    def model_name(self) -> str:
        chosen = selected()
        if chosen is not None:
            return chosen.entry.name
        return self.settings.model_id or self.engine.model_id

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
        return list(self.engine.tokenizer.encode(text, add_special_tokens=add_special_tokens))

    async def decode(self, token_ids: list[int]) -> str:
        return await self._tokenizing(lambda: self.engine.tokenizer.decode(token_ids))

    async def token_spans_json(
        self,
        text: str,
        add_special_tokens: bool = True,
        shape: Callable[[list[dict]], Any] = lambda spans: spans,
        prompt_ids: list[int] | None = None,
    ) -> bytes:
        """`text`'s tokens as TGI's `/tokenize` lists them (`{id, text, start, stop}`, the characters each
        covers), passed through `shape` and serialised to JSON, all on the validation workers: however long
        the text, the event loop only awaits. With `prompt_ids` (the ids `encode_with_images` made of `text`: the
        model's processor expanded each image placeholder into its tokens, markers and all), those ids are
        listed, each token the processor added covering the characters of the placeholder it stands for. More
        tokens than `--max-input-tokens` is a 422 naming the limit (TGI's message for an input too long to
        generate from)."""
        tokenizer, limit = self.engine.tokenizer, self.engine.config.max_input_tokens
        preprocessor = self._preprocessor(self.engine) if prompt_ids is not None else None

        def run() -> bytes:
            # refused past the limit before a Python list of its tokens is built, or aligned with the ids
            if prompt_ids is not None:
                count = len(prompt_ids)
            else:
                count = count_tokens(tokenizer, text, add_special_tokens)
            if count > limit:
                raise validation_error(too_many_input_tokens(count, limit))
            enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=add_special_tokens)
            pairs = list(zip(enc["input_ids"], enc["offset_mapping"], strict=True))
            if preprocessor is not None and prompt_ids is not None:
                pairs = aligned_spans(pairs, prompt_ids, preprocessor.image_token_id)
            if len(pairs) > limit:
                raise validation_error(too_many_input_tokens(len(pairs), limit))
            spans = [{"id": i, "text": text[a:b], "start": a, "stop": b} for i, (a, b) in pairs]
            return json.dumps(shape(spans), ensure_ascii=False).encode()

        return await self._tokenizing(run)

    def _template(self, messages: list[dict], template_kwargs: dict[str, Any]) -> str:
        """`template_kwargs`: the tools and `tgi.server.chat.template.TemplateOptions.kwargs()` (the default: the
        model's template, closed by the generation prompt)."""
        if not (template_kwargs.get("chat_template") or self.engine.tokenizer.chat_template):
            raise ApiError(422, "This model has no chat template", "template_error")
        try:
            return self.engine.tokenizer.apply_chat_template(
                messages, tokenize=False, **{"add_generation_prompt": True, **template_kwargs}
            )
        except Exception as exc:  # jinja errors (raise_exception in templates) are the client's
            raise ApiError(422, f"Template error: {exc}", "template_error") from None

    async def template_text(self, messages: list[dict], **template_kwargs: Any) -> str:
        """The chat template applied to `messages` (with the generation prompt unless told otherwise), as text."""
        return await self._tokenizing(lambda: self._template(messages, template_kwargs))

    async def render_chat(self, messages: list[dict], **template_kwargs: Any) -> list[int]:
        # The template already writes BOS where the model wants one.
        return await self._tokenizing(
            lambda: self._encode(self._template(messages, template_kwargs), add_special_tokens=False)
        )

    def _preprocessor(self, engine: ServingEngine) -> ImagePreprocessor | None:
        """`engine`'s model's image processor, loaded from its tokenizer's folder the first time."""
        known = self._preprocessors.get(id(engine))
        if known is None or known[0]() is not engine:  # a swapped-out engine's id may be reused
            self._preprocessors = {k: v for k, v in self._preprocessors.items() if v[0]() is not None}
            loaded = ImagePreprocessor.load(engine.tokenizer.name_or_path)  # the folder it was loaded from
            known = self._preprocessors[id(engine)] = (weakref.ref(engine), loaded)
        return known[1]

    def image_token(self, refs: list[ImageRef]) -> str:
        """The text a prompt holds where each image goes (its placeholder, wrapped as the model expects: Qwen2-VL's
        vision start and end tokens); the 422 naming the first image's field when the model takes no images
        (it has no image processor) or there are too many."""
        try:
            preprocessor = self._preprocessor(self.engine)
            if preprocessor is None:
                raise ImageError(
                    "this model takes no images (it has no image processor): send text only", refs[0].field
                )
            check_count(len(refs), self.image_limits, refs[-1].field)
        except ImageError as exc:
            raise validation_error(str(exc), exc.field) from None
        return preprocessor.image_prompt

    async def encode_with_images(
        self, text: str, refs: list[ImageRef], add_special_tokens: bool = True
    ) -> tuple[list[int], tuple[ImageInput, ...]]:
        """`text` (one `image_token` where each of `refs` goes) tokenized by the model's processor with every
        image's placeholder expanded, and the images it made: each URL's bytes had (`images_fetched`: on its
        own threads, abandoned when the client leaves), decoded and checked, then processed on the validation
        workers. Any image the request cannot have is a 422 with the reason, naming its field."""
        self.image_token(refs)  # the model takes images, and not this many too many
        preprocessor = self._preprocessor(self.engine)
        limits, policy = self.image_limits, self.media_policy

        def run(loaded: list[tuple[bytes, str | None]]) -> tuple[list[int], tuple[ImageInput, ...]]:
            decoded = [
                decode_image(data, kind, limits, ref.field)
                for (data, kind), ref in zip(loaded, refs, strict=True)
            ]
            return preprocessor.prepare(text, decoded, add_special_tokens)

        try:
            loaded = await images_fetched(self._fetchers, refs, policy, limits.max_bytes)
            return await self._tokenizing(lambda: run(loaded))
        except ImageError as exc:
            raise validation_error(str(exc), exc.field) from None

    async def generate(
        self, http: Request, tracker: RequestTracker, inputs: Awaitable[list[I]], stream: bool
    ) -> Generation[I]:
        """The one path of a generation request, for every API, streamed or not: awaits the route's
        `inputs` (its parsing and tokenizing), validates each once into the engine's request (`validate`:
        its grammar compiled there, off the event loop), starts the `n` engine streams of each, then
        collects every event (`stream=False`; `tracker` finishes here) or waits for the first one
        (`stream=True`, so that an error before any token keeps its HTTP status; `Generation.body` finishes
        `tracker`). A client that leaves meanwhile cancels them all. Every error is an `ApiError`, and
        finishes `tracker` with it."""
        try:
            if self.engine.model_info.pooling is not None:
                getattr(inputs, "close", lambda: None)()  # the route's coroutine, never to run
                served = serves(self.engine.model_info.pooling)
                raise validation_error(
                    f"the model {self.model_name} is a pooling model: it serves {served}, not text generation"
                )
            given = await inputs
            requests, owners = [], []
            for i, (x, request) in enumerate(zip(given, await self._validated(given), strict=True)):
                requests += _sampled(x.bound(request, http), x.n)
                owners += [i] * x.n
            if given and given[0].beam is not None:  # the route refuses it streamed
                results = await sse.cancel_on_disconnect(
                    http, searched(given, requests, owners, self._events, self.engine)
                )
                tracker.finish()
                return Generation(given, requests, owners, results)
            merged = sse.merge(
                [self._events(r, given[i].params) for r, i in zip(requests, owners, strict=True)]
            )
            if not stream:
                results = await sse.cancel_on_disconnect(http, _collected(merged, len(requests)))
                tracker.finish()
                return Generation(given, requests, owners, results)
            first, merged = await sse.cancel_on_disconnect(http, sse.peek(merged))
        except BaseException as exc:
            tracker.finish(exc)
            raise
        return Generation(given, requests, owners, [], first, merged, tracker)

    async def embed(self, http: Request, tracker: RequestTracker, req: EmbedRequest) -> list[Embedding]:
        """The one path of an embeddings request, for every API (`tgi.server.service.pooling.embed`): its
        inputs pooled by the engine through the generation's streams (`_events`); `tracker` finishes here."""
        return await embed(self, http, tracker, req, self._events)

    async def _validated(self, inputs: list[SequenceInput]) -> list[EngineRequest]:
        """Each input validated by the request's engine. With a grammar this runs on a worker thread
        (compiling may take seconds; not on the `--validation-workers`, which stay free for tokenizing);
        without one its checks are cheap and run here. A grammar that cannot be used is a 422 naming its
        field; one that cannot be compiled now (the compile queue is full), a 503 that says so."""
        engine = self.engine

        def validate_all() -> list[EngineRequest]:
            return [validated(engine, x) for x in inputs]

        if any(x.params.grammar is not None for x in inputs):
            return await asyncio.to_thread(validate_all)
        return validate_all()

    async def _events(self, request: EngineRequest, params: SamplingParams) -> AsyncIterator[TokenEvent]:
        """The engine's stream of one validated request with its errors as `ApiError`, counted in the metrics
        and traced (with the client's `params`); closing this closes (cancels) the engine's."""
        traced = (
            self.tracing.sequence(list(request.prompt_token_ids), params)
            if self.tracing is not None
            else None
        )
        try:
            events = self.engine.stream_validated(request, request_id=uuid.uuid4().hex)
        except Exception as exc:
            raise api_error(exc) from exc
        try:
            while True:
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    return
                except (ValidationError, EngineError) as exc:
                    raise api_error(exc) from exc
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
            await events.aclose()


def _sampled(request: EngineRequest, n: int) -> list[EngineRequest]:
    """`n` sequences of a validated request; with a seed, the j-th samples with seed + j (mod 2^64: a seed
    in range stays in range, so nothing is left to validate)."""
    seed = request.params.seed
    if seed is None:
        return [request] * n
    return [replace(request, params=replace(request.params, seed=(seed + j) % 2**64)) for j in range(n)]


async def _collected(merged: AsyncIterator[tuple[int, TokenEvent]], n: int) -> list[list[TokenEvent]]:
    """Every event of `n` merged streams, by stream; the first failure closes them all."""
    results: list[list[TokenEvent]] = [[] for _ in range(n)]
    try:
        async for i, event in merged:
            results[i].append(event)
    finally:
        await merged.aclose()
    return results
