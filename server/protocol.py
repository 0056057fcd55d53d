"""The engine surface the HTTP server depends on (implemented by `tgi.core.async_engine.AsyncEngine`).

The server imports nothing else from the engine, so that it can be tested against a small fake.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from tgi.core.config import EngineConfig
from tgi.core.guided import Grammar
from tgi.core.request import TokenEvent
from tgi.core.sampling_params import SamplingParams


class EngineStatsLike(Protocol):
    """A snapshot of the engine's queues and KV pool (read at each `/metrics` scrape)."""

    num_waiting: int
    num_running: int
    num_batch_tokens: int  # tokens in the current batch
    num_prefill_tokens: int  # prompt tokens run through the model since start
    num_free_blocks: int
    num_total_blocks: int
    block_size: int
    num_prefix_cache_hit_tokens: int  # prompt tokens read from the prefix cache since start
    num_prefix_cache_miss_tokens: int  # prompt tokens computed (not found in the cache) since start
    num_draft_tokens: int  # speculative decoding: guesses verified since start
    num_accepted_draft_tokens: int  # of which accepted


class ServingEngine(Protocol):
    """What the server needs: limits, tokenizer, a token stream per request, stats, lifecycle."""

    config: EngineConfig  # every limit derived (not None) once loaded
    tokenizer: Any  # a transformers PreTrainedTokenizerFast (with `chat_template` for chat models)
    model_info: Any  # tgi.core.interfaces.runner.ModelInfo
    model_id: str
    backend_name: str

    async def start(self) -> None:
        """Start the engine loop (called once inside the running event loop)."""

    def stream(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[TokenEvent]:
        """Validate the request once (defaults resolved; `ValidationError`, which the server answers with a
        422, before anything is queued), queue it and yield its tokens; closing the iterator cancels it."""
        ...

    def compile_grammar(self, grammar: Grammar) -> Any:
        """Compile a request's grammar for this model (cached), or raise `ValidationError` saying why it
        cannot be used (`tgi.core.guided.CompilerBusyError` when it cannot be compiled now). Thread-safe:
        called from a worker thread, never on the event loop; `stream` gets the result in
        `SamplingParams.compiled_grammar`."""
        ...

    def stats(self) -> EngineStatsLike: ...

    async def load_lora_adapter(self, name: str, path: str) -> None:
        """Serve a LoRA adapter from the next step on (ValueError: id taken; ConfigError: does not fit)."""

    async def unload_lora_adapter(self, name: str) -> None:
        """Refuse new requests of an adapter now, drop it once its requests have finished (KeyError: none)."""

    async def shutdown(self, cancel_inflight: bool = False, reason: str | None = None) -> None:
        """Stop the engine loop: after the requests in flight, or at once with `cancel_inflight` (each
        ends cancelled, or with `EngineError(reason)` given a `reason`, which also refuses later streams)."""

    def close(self) -> None:
        """After `shutdown`: release the model's memory (weights, KV cache); blocking, off the event loop."""
