"""Draft-token proposers (no torch here).

A proposer guesses the next tokens of a running sequence; the engine feeds them with the sequence's last
token in one step, the runner samples every position, and the longest prefix of guesses that equals what
the request itself draws is kept, plus the token drawn after it (`tgi.core.speculative.verify`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence


class Proposer(ABC):
    """Proposes draft tokens for sequences, one call per sequence per step."""

    name: str = "proposer"

    @abstractmethod
    def propose(self, request_id: str, token_ids: Sequence[int], k: int) -> list[int]:
        """At most `k` guesses of the tokens after `token_ids` (prompt + output so far); may be empty."""

    def propose_batch(self, requests: list[tuple[str, Sequence[int], int]]) -> list[list[int]]:
        """`propose` for several sequences `(request_id, token_ids, k)` at once (a model batches them)."""
        return [self.propose(request_id, token_ids, k) for request_id, token_ids, k in requests]

    def drop(self, request_id: str) -> None:  # noqa: B027 - optional
        """Forget a finished or cancelled request's state."""

    def observe_runner_guesses(self, request_id: str, num_tokens: int, guesses: list[int]) -> None:  # noqa: B027
        """The runner's own guesses at the tokens after a sequence's last drawn token, from the step that drew
        it (`StepOutput.guesses`: only a runner with speculative heads makes them); the sequence is
        `num_tokens` long now. Called after every such step for every sequence that goes on. Default:
        ignored (a proposer that guesses from the tokens alone)."""


class NgramProposer(Proposer):
    """Prompt lookup (TGI's `--speculate N` on a model without speculative heads): find the latest earlier
    place where the sequence's last `n` tokens occurred (longest `n` first, from `max_n` down to `min_n`)
    and propose the tokens that followed it there. Output that copies or edits its input (summaries, code
    edits, extraction) repeats long runs of the prompt, and those are guessed right.

    Per request, an index of the positions each n-gram ended at grows with the sequence (amortised O(1)
    per token), so a lookup costs O(max_n) whatever the length.
    """

    name = "ngram"

    def __init__(self, max_n: int = 4, min_n: int = 1) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"n-gram sizes must satisfy 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.max_n, self.min_n = max_n, min_n
        # request id -> (tokens indexed so far, {n-gram: the position just after its latest earlier end})
        self._index: dict[str, tuple[int, dict[tuple[int, ...], int]]] = {}

    def propose(self, request_id: str, token_ids: Sequence[int], k: int) -> list[int]:
        if k <= 0 or len(token_ids) < self.min_n + 1:
            return []
        done, table = self._index.get(request_id, (0, {}))
        end = len(token_ids)
        # index every n-gram that ends before the last token (the last n-gram is the one looked up)
        for stop in range(max(done, 1), end):
            for n in range(self.min_n, self.max_n + 1):
                if stop >= n:
                    table[tuple(token_ids[stop - n : stop])] = stop
        self._index[request_id] = (end, table)
        for n in range(min(self.max_n, end - 1), self.min_n - 1, -1):
            follow = table.get(tuple(token_ids[end - n : end]))
            if follow is not None:
                return list(token_ids[follow : min(follow + k, end)])
        return []

    def drop(self, request_id: str) -> None:
        self._index.pop(request_id, None)


class MedusaProposer(Proposer):
    """The guesses the heads made at each sequence's last drawn token (the runner computes them in the
    step that drew it, `StepOutput.guesses`); the engine hands them over with `observe_runner_guesses`."""

    name = "medusa"

    def __init__(self) -> None:
        self._guesses: dict[str, tuple[int, list[int]]] = {}  # request id -> (tokens known, guesses)

    def observe_runner_guesses(self, request_id: str, num_tokens: int, guesses: list[int]) -> None:
        self._guesses[request_id] = (num_tokens, guesses)

    def propose(self, request_id: str, token_ids: Sequence[int], k: int) -> list[int]:
        known, guesses = self._guesses.get(request_id, (-1, []))
        return list(guesses[:k]) if known == len(token_ids) else []

    def drop(self, request_id: str) -> None:
        self._guesses.pop(request_id, None)
