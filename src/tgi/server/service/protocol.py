"""The engine surface the HTTP server depends on, whole (implemented by `tgi.core.async_engine.AsyncEngine`).

The server reads nothing else of an engine, and reads these members directly (never with `getattr`), so
that it can be tested against a small fake (`tests/fakes/fake_engine.py`); a test checks that both the
fake and `AsyncEngine` have every member.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from tgi.core.config import EngineConfig
from tgi.core.interfaces import ModelInfo
from tgi.core.request import EngineRequest, ImageInput, TokenEvent
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
    step_seconds: float  # time in the model's steps since start
    encoder_seconds: float  # of which in the vision encoder


@runtime_checkable
class ServingEngine(Protocol):
    """What the server needs: what it shows (`/info`, `/health`, `/v1/models`), one validation and one token
    stream per request, stats, LoRA adapters at run time, lifecycle."""

    config: EngineConfig  # every limit derived (not None) once loaded
    tokenizer: Any  # a transformers PreTrainedTokenizerFast (`chat_template`: None for a model without one)
    model_info: ModelInfo  # dtype, quantization, the LoRA adapters served now
    eos_token_ids: frozenset[
        int
    ]  # the tokens that end a sequence: the model's, and its template's end of turn
    model_id: str
    backend_name: str
    speculation: str | None  # who guesses the `--speculate` tokens ("ngram", ...), None without speculation
    kernels: dict[str, str]  # which implementation each of the backend's kernels runs with
    healthy: bool  # False once the engine has died (`/health` answers 503)
    error: BaseException | None  # why it died
    on_death: Callable[[BaseException], None] | None  # called once when it dies (the launcher stops)

    async def start(self) -> None:
        """Start the engine loop (called once inside the running event loop)."""

    def validate(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        images: Sequence[ImageInput] = (),
        prediction: Sequence[int] = (),
        pooling: bool = False,
        token_embeddings: bool = False,
    ) -> EngineRequest:
        """The request's one validation (`tgi.core.validation`: defaults resolved, limits and features
        checked, `images` refused by name unless the runner takes them, a `prediction` (OpenAI's Predicted
        Outputs, token ids) unless it verifies guesses; `pooling`: a pooling request, whose one event carries
        `TokenEvent.embedding`, or `TokenEvent.token_embeddings` with `token_embeddings`; each kind refused on a
        model of the other) and its grammar compiled: `ValidationError` (a 422; `UnusableGrammarError` for the
        grammar) or `tgi.core.guided.CompilerBusyError` (a 503). Thread-safe; with a grammar it may take
        seconds: the server calls it off the event loop."""
        ...

    def stream_validated(
        self, request: EngineRequest, request_id: str | None = None
    ) -> AsyncIterator[TokenEvent]:
        """Queue a validated request and yield its tokens (`EngineError` when the engine does not serve);
        closing the iterator cancels it. Never validates or compiles again."""
        ...

    def stats(self) -> EngineStatsLike: ...

    async def load_lora_adapter(self, name: str, path: str) -> None:
        """Serve a LoRA adapter from the next step on (ValueError: id taken; ConfigError: does not fit)."""

    async def unload_lora_adapter(self, name: str) -> None:
        """Refuse new requests of an adapter now, drop it once its requests have finished (KeyError: none)."""

    async def reset_prefix_cache(self) -> int:
        """Empty the prefix cache between two steps; the number of blocks dropped from it."""

    async def shutdown(self, cancel_inflight: bool = False, reason: str | None = None) -> None:
        """Stop the engine loop: after the requests in flight, or at once with `cancel_inflight` (each
        ends cancelled, or with `EngineError(reason)` given a `reason`, which also refuses later streams)."""

    def close(self) -> None:
        """After `shutdown`: release the model's memory (weights, KV cache); blocking, off the event loop."""
