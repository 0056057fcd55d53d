"""What the event loop asks of the engine thread (`tgi.core.async_engine.AsyncEngine`): commands it drains
at the start of every step."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tgi.core.request import EngineRequest


@dataclass(frozen=True)
class AddRequest:
    """Queue a request as `LLMEngine.validate` made it (the engine thread does not check it again)."""

    request_id: str
    request: EngineRequest


@dataclass(frozen=True)
class AbortRequest:
    """Cancel a request (its client went away, or the engine shuts down) and free its KV blocks."""

    request_id: str


@dataclass(frozen=True)
class LoadAdapter:
    """Load a LoRA adapter between two steps (`ServedAdapters.load`); `done` gets None or the error."""

    name: str
    path: str
    done: asyncio.Future


@dataclass(frozen=True)
class UnloadAdapter:
    """Retire a LoRA adapter at once and drop it when its last request has finished; `done` gets None, or
    KeyError when it is not loaded."""

    name: str
    done: asyncio.Future


@dataclass(frozen=True)
class ResetPrefixCache:
    """Empty the prefix cache between two steps (`LLMEngine.reset_prefix_cache`); `done` gets the number of
    blocks dropped from it."""

    done: asyncio.Future


EngineCommand = AddRequest | AbortRequest | LoadAdapter | UnloadAdapter | ResetPrefixCache
