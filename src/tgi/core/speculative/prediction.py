"""Guesses from the output a request predicts for itself (OpenAI's Predicted Outputs; no torch here).

A request may give the text it expects back (`prediction`: the file it asks to have edited, say), as token
ids. The proposer walks the output along the prediction: a cursor at the prediction's token the output should
say next. While each new output token is that one, the cursor moves on and the next tokens of the prediction
are the guesses, verified as any others (`tgi.core.speculative.proposer`), so the output is what it would be
without them.

Where the output leaves the prediction (an edit), there are no guesses until it comes back: after each new
token, the longest of the output's last `max_n` .. `min_n` tokens that the prediction holds re-joins it, at
its first place at or after the last token matched in order (the edit's place; else the last place before
it), preferring one that starts at most `NEAR` tokens after that place (a word or a line replaced); one
elsewhere (a passage deleted) only once the n-gram is wholly the output's since it left. Prompt lookup over
the prediction, anchored at the edit: a short n-gram found in many places (` =`, a newline) re-joins where
the edit left, not at the prediction's end as a most-recent match would, nor where a repetitive file says
the edit's new word in another line.

How many guesses: twice the tokens the output has said in a row on the prediction (`run`; at least
`MIN_GUESSES`, at most what the engine asks). A step's cost grows with its positions, so a prediction the
output has only begun to follow is tried with few guesses, one it keeps following with many. Leaving the
prediction halves the run, and a re-join near the edit's place goes on with it (a long-followed prediction
is still trusted after an edit, one the output keeps leaving less and less); a re-join elsewhere (an n-gram
the output happens to share with another part) starts a new run.

`accepted` counts the prediction's tokens that appeared in the output where the walk placed them (each
position once): OpenAI's `accepted_prediction_tokens`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Sequence

from tgi.core.speculative.proposer import Proposer

#: the fewest guesses a walk makes while on its prediction (its first step, and after a re-join elsewhere)
MIN_GUESSES = 4
#: a re-join at most this many prediction tokens after the edit's place continues the walk's run
NEAR = 16


class PredictedOutput:
    """One request's prediction and where its output stands on it."""

    def __init__(self, prediction: Sequence[int], max_n: int = 4, min_n: int = 1) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"n-gram sizes must satisfy 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.tokens = tuple(prediction)
        self.max_n, self.min_n = max_n, min_n
        self.cursor: int | None = 0  # the prediction's token the output should say next; None: left it
        self.anchor = 0  # just after the last prediction token the output said in order
        # output tokens said in order on the prediction since it joined it (halved at each leaving)
        self.run = 0
        self.tail: deque[int] = deque(maxlen=max_n)  # the output's last tokens, for re-joining
        self.num_lost = 0  # output tokens said since the walk left the prediction
        self.num_seen = 0  # output tokens walked so far
        self._matched = bytearray(len(self.tokens))  # positions the output said
        self.accepted = 0
        # n-gram -> the positions just after its places, built lazily
        self._ends: dict[tuple[int, ...], list[int]] | None = None

    def follow(self, token_ids: Sequence[int], start: int = 0) -> None:
        """Walk the output tokens not seen yet: `token_ids[start:]` is the whole output so far."""
        for i in range(start + self.num_seen, len(token_ids)):
            self._step(token_ids[i])
        self.num_seen = max(self.num_seen, len(token_ids) - start)

    def guesses(self, k: int) -> list[int]:
        """The next tokens of the prediction, at most `k` (fewer while the output has followed it for
        little), where the output is on it (else none)."""
        if self.cursor is None or k <= 0:
            return []
        n = min(k, max(MIN_GUESSES, 2 * self.run))
        return list(self.tokens[self.cursor : self.cursor + n])

    def _step(self, token: int) -> None:
        self.tail.append(token)
        at = self.cursor
        if at is not None and at < len(self.tokens) and self.tokens[at] == token:
            self._mark(at, at + 1)
            self.cursor = self.anchor = at + 1
            self.run += 1
            return
        if at is not None:  # leaving it: the run it had counts for half
            self.run //= 2
        self.num_lost += 1
        self.cursor = self._rejoin()
        if self.cursor is not None:
            self.num_lost = 0

    def _rejoin(self) -> int | None:
        """The place just after the output's last n-gram in the prediction: the longest one that starts at
        most `NEAR` tokens after the anchor (the edit's place); else, once `max_n` tokens were said off the
        prediction, the longest anywhere, at its first place at or after the anchor (else its last before
        it). None: not yet, or the prediction holds none of them."""
        ends, tail = self._index(), tuple(self.tail)
        grams = [(n, ends.get(tail[-n:])) for n in range(len(tail), self.min_n - 1, -1)]
        for n, places in grams:  # near the edit first: its run goes on
            i = bisect_left(places or (), self.anchor + n)  # the whole n-gram at or after the anchor
            if places and i < len(places) and places[i] - n - self.anchor <= NEAR:
                self._mark(places[i] - n, places[i])
                return places[i]
        if self.num_lost < self.max_n:  # elsewhere: only for an n-gram wholly said after the walk left
            return None
        for n, places in grams:
            if places:
                i = bisect_left(places, self.anchor + n)
                end = places[i] if i < len(places) else places[-1]
                self._mark(end - n, end)
                self.run = n  # elsewhere: a new run
                return end
        return None

    def _index(self) -> dict[tuple[int, ...], list[int]]:
        if self._ends is None:  # first divergence: an output that follows its prediction never needs it
            self._ends = {}
            tokens = self.tokens
            for end in range(1, len(tokens) + 1):
                for n in range(self.min_n, min(self.max_n, end) + 1):
                    self._ends.setdefault(tokens[end - n : end], []).append(end)
        return self._ends

    def _mark(self, start: int, stop: int) -> None:
        for i in range(start, stop):
            if not self._matched[i]:
                self._matched[i] = 1
                self.accepted += 1


class PredictionProposer(Proposer):
    """Guesses for the requests that gave a prediction (`start`), each from its own (`PredictedOutput`)."""

    name = "prediction"

    def __init__(self) -> None:
        self._walks: dict[str, tuple[int, PredictedOutput]] = {}  # request id -> (prompt length, walk)

    def start(self, request_id: str, num_prompt_tokens: int, prediction: Sequence[int]) -> None:
        self._walks[request_id] = (num_prompt_tokens, PredictedOutput(prediction))

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._walks

    def __len__(self) -> int:
        return len(self._walks)

    def propose(self, request_id: str, token_ids: Sequence[int], k: int) -> list[int]:
        walk = self.walked(request_id, token_ids)
        return walk.guesses(k) if walk is not None else []

    def walked(self, request_id: str, token_ids: Sequence[int]) -> PredictedOutput | None:
        """The request's walk, caught up with its output (`token_ids`: prompt and output); None without one."""
        known = self._walks.get(request_id)
        if known is None:
            return None
        num_prompt_tokens, walk = known
        walk.follow(token_ids, num_prompt_tokens)
        return walk

    def drop(self, request_id: str) -> None:
        self._walks.pop(request_id, None)
