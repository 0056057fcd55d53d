"""When a sequence ends: stop sequences on the streamed text, and token-level finish reasons."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tgi.core.request import FinishReason
from tgi.core.sampling_params import SamplingParams


@dataclass(frozen=True)
class StopCheck:
    """The result of feeding one chunk of text to a `StopChecker`."""

    text: str  # text safe to emit now ("" while it could still be the start of a stop sequence)
    stopped: bool = False  # a stop sequence matched: the sequence is finished
    stop_sequence: str | None = None  # which one


class StopChecker:
    """Matches stop sequences on the detokenized text stream, across token boundaries.

    Feed it each new chunk of text (`IncrementalDetokenizer.add`). Text that could be the beginning of a
    stop sequence is held back until it is known not to be one, so streamed text never contains part of a
    stop string. On a match, the emitted text ends right before the stop sequence, or right after it with
    `include_stop_in_output=True`.

    Conventions differ: OpenAI excludes the stop sequence from the output, TGI's `generated_text` includes
    it; `SamplingParams.include_stop_str_in_output` picks (TGI's routes set it, `/v1` does not).
    """

    def __init__(self, stop_sequences: Sequence[str] = (), include_stop_in_output: bool = False) -> None:
        self.stop_sequences: tuple[str, ...] = tuple(dict.fromkeys(s for s in stop_sequences if s))
        self._matchers = [_PrefixMatcher(stop) for stop in self.stop_sequences]
        self.include_stop_in_output = include_stop_in_output
        self._pending = ""  # held back: a suffix that is a proper prefix of some stop sequence
        self._emitted: list[str] = []
        self.stopped = False
        self.stop_sequence: str | None = None

    def add(self, text: str, can_stop: bool = True) -> StopCheck:
        """Feed new text. `can_stop=False` (e.g. before `min_new_tokens`) lets full stop sequences through
        while still holding back a possible prefix at the end. After a stop, further text is ignored."""
        if self.stopped:
            return StopCheck("", True, self.stop_sequence)
        if not self.stop_sequences:
            return self._emit(text)
        buf = self._pending + text
        for matcher in self._matchers:
            matcher.feed(text)
        if can_stop:
            match = self._find(buf)
            if match is not None:
                idx, stop = match
                end = idx + len(stop) if self.include_stop_in_output else idx
                self._pending = ""
                self.stopped, self.stop_sequence = True, stop
                out = self._emit(buf[:end])
                return StopCheck(out.text, True, stop)
        hold = self._held_suffix_len(buf)
        self._pending = buf[len(buf) - hold :] if hold else ""
        return self._emit(buf[: len(buf) - hold])

    def flush(self) -> str:
        """The sequence ended for another reason: release the held-back text (it is not a stop)."""
        out, self._pending = ("" if self.stopped else self._pending), ""
        return self._emit(out).text

    @property
    def text(self) -> str:
        """All text emitted so far (the output, without held-back text)."""
        if len(self._emitted) > 1:
            self._emitted = ["".join(self._emitted)]
        return self._emitted[0] if self._emitted else ""

    @property
    def pending(self) -> str:
        """Text held back because it could start a stop sequence."""
        return self._pending

    def _emit(self, text: str) -> StopCheck:
        if text:
            self._emitted.append(text)
        return StopCheck(text, self.stopped, self.stop_sequence)

    def _find(self, buf: str) -> tuple[int, str] | None:
        """Earliest stop sequence in `buf` (the longest one on a tie)."""
        best: tuple[int, str] | None = None
        for stop in self.stop_sequences:
            i = buf.find(stop)
            if i >= 0 and (best is None or i < best[0] or (i == best[0] and len(stop) > len(best[1]))):
                best = (i, stop)
        return best

    def _held_suffix_len(self, buf: str) -> int:
        """Length of the longest suffix of `buf` that is a proper prefix of a stop sequence. Each stop's
        `_PrefixMatcher` has read the text as it came, so this costs nothing per prefix length (trying each
        length cost a 100,000-character stop seconds per token)."""
        return max((m.held(len(buf)) for m in self._matchers), default=0)


class _PrefixMatcher:
    """Knuth-Morris-Pratt over a text stream: after `feed`, `state` is the length of the longest suffix of
    the text so far that is a prefix of `stop`. Amortised O(1) per character."""

    def __init__(self, stop: str) -> None:
        self.stop = stop
        self.fail = [0] * len(stop)  # fail[i]: longest proper prefix of stop[:i + 1] that is also its suffix
        k = 0
        for i in range(1, len(stop)):
            while k and stop[i] != stop[k]:
                k = self.fail[k - 1]
            if stop[i] == stop[k]:
                k += 1
            self.fail[i] = k
        self.state = 0

    def feed(self, text: str) -> None:
        stop, fail, k = self.stop, self.fail, self.state
        for ch in text:
            if k == len(stop):  # a whole stop that was let through (`can_stop=False`): go on from its border
                k = fail[k - 1]
            while k and ch != stop[k]:
                k = fail[k - 1]
            if ch == stop[k]:
                k += 1
        self.state = k

    def held(self, limit: int) -> int:
        """The longest proper prefix of `stop` that ends the text, at most `limit` characters long."""
        k = self.state
        if k == len(self.stop):
            k = self.fail[k - 1]
        while k > limit:
            k = self.fail[k - 1]
        return k


def token_finish_reason(
    token_id: int,
    num_generated: int,
    params: SamplingParams,
    eos_token_ids: Collection[int],
) -> FinishReason | None:
    """Token-level finish decision after a token is generated (`num_generated` counts it).

    * EOS (any of `eos_token_ids`) ends the sequence unless `params.ignore_eos`; `params.stop_token_ids`
      always do (reported as EOS, as TGI has no separate reason). Both are ignored while
      `num_generated < params.min_new_tokens`.
    * `max_new_tokens` reached -> LENGTH.

    When EOS and the length limit coincide, EOS wins (the sequence ended on its own); TGI reports
    "length" in that case. Stop sequences are matched on the text by `StopChecker` and take precedence over
    LENGTH too (see `combine_finish_reasons`).
    """
    if num_generated >= params.min_new_tokens:
        if token_id in params.stop_token_set:
            return FinishReason.EOS
        if not params.ignore_eos and token_id in eos_token_ids:
            return FinishReason.EOS
    if num_generated >= params.max_new_tokens:
        return FinishReason.LENGTH
    return None


def combine_finish_reasons(token_reason: FinishReason | None, stop_matched: bool) -> FinishReason | None:
    """The reason to report when a token both produced a finish reason and completed a stop sequence:
    EOS > STOP > LENGTH."""
    if token_reason is FinishReason.EOS:
        return token_reason
    if stop_matched:
        return FinishReason.STOP
    return token_reason


def stop_sequences_allowed(num_generated: int, params: SamplingParams) -> bool:
    """Stop sequences are ignored before `min_new_tokens` tokens (pass as `StopChecker.add(can_stop=...)`)."""
    return num_generated >= params.min_new_tokens
