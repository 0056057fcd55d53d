"""The engine's side of guided decoding: one parser state per constrained request, a batch's token masks.

Torch-free: masks are numpy bit arrays (`TokenMasks`) that a backend's sampler applies to its logits.
Each request's state is created when it is queued (a copy of its compiled grammar's initial state),
advanced by every token it generates, kept through preemption (recomputation replays the KV cache, not the
output: the grammar state is already past those tokens), and dropped when the request finishes or is
cancelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tgi.core.guided.compiler import CompiledGrammar
from tgi.core.interfaces.batch import ScheduledSequence, TokenMasks


class GrammarStateError(RuntimeError):
    """A sampled token broke its request's grammar: the mask was not applied (a sampler bug)."""


class GuidedDecoding:
    """Parser states by request id, and the masks of the rows a step samples."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.words = (vocab_size + 31) // 32
        self._matchers: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self._matchers)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._matchers

    def start(self, request_id: str, compiled: CompiledGrammar) -> None:
        self._matchers[request_id] = compiled.new_matcher()

    def drop(self, request_id: str) -> None:
        self._matchers.pop(request_id, None)

    def masks(self, sampled: Sequence[ScheduledSequence]) -> TokenMasks | None:
        """The allowed tokens of each constrained row among `sampled` (the rows a step samples, in the
        order the sampler gets them); None when no row is constrained (and then nothing is computed)."""
        if not self._matchers:
            return None
        rows = [i for i, s in enumerate(sampled) if s.request_id in self._matchers]
        if not rows:
            return None
        bitmask = np.empty((len(rows), self.words), dtype=np.int32)
        for j, i in enumerate(rows):
            matcher = self._matchers[sampled[i].request_id]
            matcher.unsafe_compute_mask_ptr(bitmask[j].ctypes.data, self.words * 4)
        return TokenMasks(rows=tuple(rows), bitmask=bitmask, vocab_size=self.vocab_size)

    def advance(self, request_id: str, token_id: int) -> None:
        """Feed the request's new token to its parser (no-op for unconstrained requests)."""
        matcher = self._matchers.get(request_id)
        if matcher is not None and not matcher.consume_token(token_id):
            error = matcher.get_error().strip().splitlines()
            raise GrammarStateError(
                f"{request_id}: token {token_id} is outside its grammar ({error[0] if error else ''})"
            )
