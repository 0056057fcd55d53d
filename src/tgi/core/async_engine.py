"""The engine behind the server: `LLMEngine` stepping on its own thread, one async stream per request.

The event loop never runs model code: it queues a command with a validated request (`validate`, off the
loop when it compiles a grammar) and awaits events. The engine thread
drains commands (`AddRequest`, `AbortRequest`, `LoadAdapter`, `UnloadAdapter`) at the start of every step,
so a cancellation frees its blocks within one step and a LoRA adapter is loaded or unloaded between steps.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Sequence

from tgi.core.config import EngineConfig
from tgi.core.engine import EngineStats, LLMEngine
from tgi.core.engine_commands import (
    AbortRequest,
    AddRequest,
    EngineCommand,
    LoadAdapter,
    ResetPrefixCache,
    UnloadAdapter,
)
from tgi.core.interfaces import ModelInfo
from tgi.core.request import (
    EngineError,
    EngineRequest,
    FinishReason,
    GenerationResult,
    ImageInput,
    StepError,
    TokenEvent,
    client_message_of,
)
from tgi.core.sampling_params import SamplingParams

log = logging.getLogger(__name__)


class AsyncEngine:
    """Implements `tgi.server.service.protocol.ServingEngine` for the server."""

    def __init__(self, engine: LLMEngine, model_id: str | None = None, backend_name: str | None = None):
        self.engine = engine
        self.model_id = model_id or engine.config.model_id or "SmolLM2-135M-Instruct"
        self.backend_name = backend_name or engine.backend.name
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wakeup = threading.Event()
        self._streams: dict[str, asyncio.Queue] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._refusal: str | None = None  # why streams are refused once `shutdown(reason=...)` was called
        self.error: BaseException | None = None  # set when the engine thread died
        # retired LoRA adapters waiting for their last request (engine thread)
        self._unloading: list[UnloadAdapter] = []
        # (event loop) the open streams of each adapter's requests, and the unloads waiting for them to end:
        # an unload returns once its requests' streams have handed out their last event, not only once the
        # engine has finished them (the server then answers the unload after the streams' last writes)
        self._adapter_streams: dict[str, set[str]] = {}
        self._unload_waiters: dict[str, list[asyncio.Future]] = {}
        # called once, on the engine thread, when it dies (a server stops: a dead engine serves nothing)
        self.on_death: Callable[[BaseException], None] | None = None

    @classmethod
    def from_config(
        cls, config: EngineConfig, progress: Callable[[str], None] | None = None, registry=None
    ) -> AsyncEngine:
        engine = LLMEngine.from_config(config, registry=registry, progress=progress)
        # this thread loaded and warmed up the model; from `start` on the engine's own thread steps it
        engine.backend.release_loading_thread()
        return cls(engine, model_id=config.model_id)

    # -- what the server reads ----------------------------------------------------------------------------
    @property
    def config(self) -> EngineConfig:
        return self.engine.config

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def model_info(self) -> ModelInfo:
        """The loaded model's (its `lora_adapters` follow the adapters loaded and unloaded at run time)."""
        return self.engine.model_info

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """The tokens that end a sequence (`LLMEngine.eos_token_ids`)."""
        return self.engine.eos_token_ids

    @property
    def speculation(self) -> str | None:
        """Who guesses the `--speculate` tokens ("ngram", "draft-model", "medusa"), None without speculation."""
        proposer = self.engine.proposer
        return proposer.name if proposer is not None else None

    @property
    def kernels(self) -> dict[str, str]:
        """Which implementation each of the backend's kernels runs with here (`Backend.describe_kernels`)."""
        return self.engine.backend.describe_kernels(self.engine.config.dtype)

    def stats(self) -> EngineStats:
        return self.engine.stats()

    @property
    def healthy(self) -> bool:
        return self.error is None and (self._thread is None or self._thread.is_alive())

    # -- lifecycle --------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self.engine.backend.serve_beside_event_loop()
        self._thread = threading.Thread(target=self._run, name="tgi-engine", daemon=True)
        self._thread.start()

    async def shutdown(self, cancel_inflight: bool = False, reason: str | None = None) -> None:
        """Stop the engine thread. Without `cancel_inflight`, waits for running requests to finish; with it,
        they end at once: as cancelled, or, given a `reason`, with `EngineError(reason)` (a message written
        to be shown to their clients). A `reason` also refuses every later `stream` with that error."""
        if reason is not None:
            self._refusal = reason
        if cancel_inflight:
            for request_id in list(self._streams):
                self._commands.put(AbortRequest(request_id))
                if reason is None:
                    self._deliver([_cancelled(request_id)])
                else:
                    self._deliver_error(request_id, EngineError(reason))
        while not cancel_inflight and self._streams and self.healthy:
            await asyncio.sleep(0.05)
        self._stopping = True
        self._wakeup.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)

    def close(self) -> None:
        """After `shutdown`: release the model (`LLMEngine.close`: weights, KV cache, worker processes, the
        backend's cached memory); the engine cannot serve again. Blocking: call it off the event loop.
        `EngineError` while the engine thread still runs (a step that outlived `shutdown`'s wait)."""
        if self._thread is not None and self._thread.is_alive():
            raise EngineError("the engine thread is still stepping: its model cannot be released yet")
        self.engine.close()

    # -- requests ---------------------------------------------------------------------------------------
    def validate(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        images: Sequence[ImageInput] = (),
        prediction: Sequence[int] = (),
        pooling: bool = False,
        token_embeddings: bool = False,
    ) -> EngineRequest:
        """`LLMEngine.validate`: the request's one validation, its grammar compiled (`ValidationError`,
        `CompilerBusyError`), its `images` refused by name unless the runner takes them, its `prediction`
        unless the runner verifies guesses; `pooling` a pooling request (embeddings), `token_embeddings` one of
        every token's hidden state. Thread-safe; with a grammar it may take seconds, so the server
        calls it off the event loop."""
        return self.engine.validate(prompt_token_ids, params, images, prediction, pooling, token_embeddings)

    def stream(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[TokenEvent]:
        """`validate` (on the caller's thread, `ValidationError` at once), then `stream_validated`: the one
        call for in-process callers."""
        return self.stream_validated(self.validate(prompt_token_ids, params), request_id)

    def stream_validated(
        self, request: EngineRequest, request_id: str | None = None
    ) -> AsyncIterator[TokenEvent]:
        """Queue a validated request and return its event stream (`EngineError` at once when the engine is
        not serving); closing the stream early cancels the request. Nothing here or on the engine thread
        validates or compiles."""
        if self._refusal is not None:
            raise EngineError(self._refusal)
        if not self.healthy:
            raise self._not_running()
        request_id = request_id or uuid.uuid4().hex
        events: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = events
        self._commands.put(AddRequest(request_id, request))
        self._wakeup.set()
        return self._iterate(request_id, events, request.params.adapter_id)

    # -- LoRA adapters at run time -------------------------------------------------------------------------
    async def load_lora_adapter(self, name: str, path: str) -> None:
        """Load the PEFT adapter in folder `path` as `name`: the engine thread reads and attaches it between
        two steps. Raises what `tgi.core.lora.served_adapters.ServedAdapters.load` raises (ValueError: id
        taken, ConfigError: the adapter does not fit, with the reason)."""
        await self._engine_command(lambda done: LoadAdapter(name, path, done))

    async def unload_lora_adapter(self, name: str) -> None:
        """Unload adapter `name` without failing a request: from the next step on no new request may name
        it; the requests admitted before finish with it; then its weights are dropped, and this returns once
        those requests' streams (read at least once) have handed out their last event. KeyError when it is
        not loaded."""
        await self._engine_command(lambda done: UnloadAdapter(name, done))

    async def reset_prefix_cache(self) -> int:
        """Empty the prefix cache between two steps; returns the blocks dropped from it (KV events:
        `AllBlocksCleared`). Requests in flight keep their blocks."""
        return await self._engine_command(ResetPrefixCache)

    async def _engine_command(self, make):
        if not self.healthy or self._thread is None:
            raise self._not_running()
        done = asyncio.get_running_loop().create_future()
        self._commands.put(make(done))
        self._wakeup.set()
        return await done

    def _not_running(self) -> EngineError:
        shown = f"the engine is not running: {client_message_of(self.error)}"
        return EngineError(f"the engine is not running: {self.error}", shown=shown)

    def _settle(self, done: asyncio.Future, error: BaseException | None, result=None) -> None:
        def settle() -> None:
            if not done.done():
                done.set_result(result) if error is None else done.set_exception(error)

        self._loop.call_soon_threadsafe(settle)

    def _finish_unloads(self) -> None:
        """Drop the retired adapters no unfinished request uses any more (engine thread)."""
        for command in list(self._unloading):
            lora = self.engine.lora
            if command.name in lora.loaded and lora.users(command.name):
                continue
            self._unloading.remove(command)
            try:
                if command.name in lora.loaded:  # another unload of it may have dropped it already
                    lora.unload(command.name)
                self._loop.call_soon_threadsafe(self._after_streams, command.name, command.done)
            except Exception as exc:
                self._settle(command.done, exc)

    def _after_streams(self, adapter: str, done: asyncio.Future) -> None:
        """(event loop) `done` gets None once no stream of `adapter`'s requests is open."""
        if self._adapter_streams.get(adapter):
            self._unload_waiters.setdefault(adapter, []).append(done)
        elif not done.done():
            done.set_result(None)

    def _stream_closed(self, request_id: str, adapter: str) -> None:
        """(event loop) A stream of `adapter`'s ended: the unloads waiting for its last one may return."""
        open_ = self._adapter_streams.get(adapter, set())
        open_.discard(request_id)
        if open_:
            return
        self._adapter_streams.pop(adapter, None)
        for done in self._unload_waiters.pop(adapter, []):
            if not done.done():
                done.set_result(None)

    async def _iterate(
        self, request_id: str, events: asyncio.Queue, adapter: str | None = None
    ) -> AsyncIterator[TokenEvent]:
        # counted from the first read, so that a stream never read cannot hold an unload back
        if adapter is not None:
            self._adapter_streams.setdefault(adapter, set()).add(request_id)
        finished = False
        try:
            while True:
                item = await events.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    finished = True
                    return
        finally:
            self._streams.pop(request_id, None)
            if adapter is not None:
                self._stream_closed(request_id, adapter)
            if not finished:  # the consumer went away (client disconnected): free its blocks now
                self._commands.put(AbortRequest(request_id))
                self._wakeup.set()

    async def generate(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> GenerationResult:
        result = None
        async for event in self.stream(prompt_token_ids, params, request_id):
            if result is None:
                result = GenerationResult(event.request_id, "", [], FinishReason.LENGTH)
            result.add(event)
        return result

    # -- the engine thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        engine = self.engine
        try:
            while not self._stopping:
                self._drain_commands()
                if self._unloading:
                    self._finish_unloads()
                if not engine.has_unfinished():
                    self._wakeup.wait(0.5)
                    self._wakeup.clear()
                    continue
                try:
                    events = engine.step()
                except StepError as exc:  # fail the step's requests, keep serving the others
                    log.error("engine step failed; failing %s", exc.request_ids, exc_info=exc.__cause__)
                    self._fail(exc.request_ids, exc)
                    continue
                if events:
                    self._loop.call_soon_threadsafe(self._deliver, events)
            # Apply what was queued before the stop (the aborts of `shutdown(cancel_inflight=True)`), then
            # cancel whatever is left, so that every KV block is free once the thread has ended.
            self._drain_commands()
            for command in self._unloading:
                self._settle(command.done, EngineError("the engine was shut down"))
            if engine.abort_all():
                self._loop.call_soon_threadsafe(self._fail_streams, EngineError("the engine was shut down"))
        except BaseException as exc:
            self.error = exc
            log.exception("engine thread died")
            # the details for the engine's callers (a shard's failure names its rank), `shown` for clients
            cause = str(exc) if isinstance(exc, EngineError) else f"{type(exc).__name__} (see the server log)"
            died = EngineError(
                f"the engine died: {cause}", shown=f"the engine died: {client_message_of(exc)}"
            )
            self._loop.call_soon_threadsafe(self._fail_streams, died)
            for command in self._unloading:
                self._settle(command.done, died)
            if self.on_death is not None:
                self.on_death(exc)

    def _drain_commands(self) -> None:
        while True:
            try:
                command: EngineCommand = self._commands.get_nowait()
            except queue.Empty:
                return
            if isinstance(command, AddRequest):
                try:
                    self.engine.add_validated_request(command.request, command.request_id)
                except Exception as exc:
                    self._loop.call_soon_threadsafe(self._deliver_error, command.request_id, exc)
            elif isinstance(command, LoadAdapter):
                try:
                    self.engine.lora.load(command.name, command.path)
                    self._settle(command.done, None)
                except Exception as exc:  # refused (with the reason), the engine keeps serving
                    self._settle(command.done, exc)
            elif isinstance(command, ResetPrefixCache):
                try:
                    self._settle(command.done, None, self.engine.reset_prefix_cache())
                except Exception as exc:
                    self._settle(command.done, exc)
            elif isinstance(command, UnloadAdapter):
                if command.name not in self.engine.lora.loaded:
                    self._settle(command.done, KeyError(command.name))
                    continue
                if command.name in self.engine.lora.served:
                    self.engine.lora.retire(command.name)
                self._unloading.append(command)
            else:
                try:
                    self.engine.abort(command.request_id)
                except Exception:  # its client is gone already; the engine thread must not die of it
                    log.exception("aborting request %s failed", command.request_id)

    def _fail(self, request_ids: list[str], error: EngineError) -> None:
        for request_id in request_ids:
            self.engine.abort(request_id)
        self._loop.call_soon_threadsafe(self._fail_streams, error, request_ids)

    # these run on the event loop
    def _deliver(self, events: list[TokenEvent]) -> None:
        for event in events:
            stream = self._streams.get(event.request_id)
            if stream is not None:
                stream.put_nowait(event)

    def _deliver_error(self, request_id: str, error: BaseException) -> None:
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.put_nowait(error)

    def _fail_streams(self, error: BaseException, request_ids: list[str] | None = None) -> None:
        """Fail the streams of `request_ids` (all of them by default)."""
        for request_id in list(self._streams) if request_ids is None else request_ids:
            stream = self._streams.get(request_id)
            if stream is not None:
                stream.put_nowait(error)


def _cancelled(request_id: str) -> TokenEvent:
    return TokenEvent(request_id, 0, 0, "", "", None, False, finish_reason=FinishReason.CANCELLED)
