"""A generation request as the routes and the service hand it to each other: what a route asks for
(`SequenceInput`) and what comes back (`Generation`: the sequences' events, whole or streamed)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Generic, TypeVar

from tgi.core.request import EngineRequest, ImageInput, TokenEvent
from tgi.core.sampling_params import SamplingParams
from tgi.server.http import sse
from tgi.server.http.auth import tenant_of

if TYPE_CHECKING:
    from starlette.requests import Request

    from tgi.server.http.errors import ApiError
    from tgi.server.service.beam_search import BeamSearch
    from tgi.server.service.request_tracker import RequestTracker


def visible_text(event: TokenEvent) -> str:
    """What the client sees of a token: its text, as the request's detokenizer made it (special tokens shown
    only with `skip_special_tokens: false`, the token that ended the sequence only with
    `include_stop_str_in_output`: `tgi.core.output`)."""
    return event.text


@dataclass(frozen=True)
class SequenceInput:
    """A prompt a route asks the engine to sample from, as its API gave it (checked for its HTTP shape, not
    yet validated against the engine), and how many sequences to sample from it."""

    prompt_token_ids: list[int]
    params: SamplingParams  # the API's parameters; `grammar` set where asked (compiled by validation)
    grammar_field: str | None = None  # the request field that gave `params.grammar` (its 422 names it)
    n: int = 1  # sequences sampled from it (TGI's `best_of`, OpenAI's `n`); with a seed, the j-th uses
    # seed + j (mod 2^64), as OpenAI's choices do
    images: tuple[ImageInput, ...] = ()  # the prompt's images, their placeholders in `prompt_token_ids`
    cache_salt: str | None = None  # the client's `cache_salt` (vLLM's), non-empty: `EngineRequest.cache_salt`
    prediction: tuple[int, ...] = ()  # OpenAI's `prediction`, tokenized: `EngineRequest.prediction`
    beam: BeamSearch | None = (
        None  # vLLM's `use_beam_search`: `n` is its width (`tgi.server.service.beam_search`)
    )

    def bound(self, request: EngineRequest, http: Request) -> EngineRequest:
        """`request` (this input as the engine validated it) with who may share its prefix-cache blocks: the
        requests of the same tenant (`tgi.server.http.auth.tenant_of`) that give the same `cache_salt`."""
        return replace(request, cache_salt=self.cache_salt, tenant=tenant_of(http))


I = TypeVar("I", bound=SequenceInput)  # noqa: E741 - a route's own kind of input (OpenAI's `Prompt`)


@dataclass
class Generation(Generic[I]):
    """A generation request on its way back (`InferenceService.generate`): its inputs as the route gave
    them, the engine sequences validation made of them (input i's `n` sequences together, in order), and
    either every sequence's events (not streamed) or the event stream."""

    inputs: list[I]
    requests: list[EngineRequest]  # one per sequence: prompt tokens and parameters with defaults resolved
    owners: list[int]  # one per sequence: the index of its input
    results: list[list[TokenEvent]]  # not streamed: each sequence's events, in order
    _first: tuple[int, TokenEvent] | None = None  # streamed: the first event, already come
    _merged: AsyncIterator[tuple[int, TokenEvent]] | None = None  # streamed: the events after it
    _tracker: RequestTracker | None = None  # streamed: finished when the body ends

    def input_of(self, sequence: int) -> I:
        return self.inputs[self.owners[sequence]]

    async def events(self) -> AsyncIterator[tuple[int, TokenEvent]]:
        """Streamed: every event as it comes, tagged with its sequence's index."""
        item = self._first
        while item is not None:
            yield item
            item = await anext(self._merged, None)

    def body(
        self, chunks: AsyncIterator[bytes], path: str, failed: Callable[[ApiError], bytes] | None = None
    ) -> AsyncIterator[bytes]:
        """Streamed: the response body, the route's `chunks` then, if an error comes once the headers are
        sent, that error as the last event (`failed(error)`, else in the shape of the API at `path`);
        however it ends, the engine's streams are closed and the request's tracker finishes once
        (`sse.with_error_tail`)."""
        return sse.with_error_tail(chunks, self._merged, self._tracker, path, failed)
