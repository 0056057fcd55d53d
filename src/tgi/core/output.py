"""One request's output pipeline: sampled tokens -> text -> stop checks -> `TokenEvent`s."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Collection

from tgi.core.detokenizer import IncrementalDetokenizer
from tgi.core.interfaces.batch import StepOutput
from tgi.core.request import FinishReason, PromptToken, TokenEvent, TopToken
from tgi.core.sequence import Sequence
from tgi.core.stopping import StopChecker, combine_finish_reasons, stop_sequences_allowed, token_finish_reason


class RequestOutput:
    """Turns each new token of `seq` into a `TokenEvent`: incremental text that never splits a UTF-8
    character nor leaks part of a stop sequence, the finish reason, and the details a client asked for."""

    def __init__(self, seq: Sequence, tokenizer, eos_token_ids: Collection[int]) -> None:
        self.seq = seq
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        params = seq.params
        self.detokenizer = IncrementalDetokenizer(
            tokenizer, seq.prompt_token_ids, params.skip_special_tokens, params.spaces_between_special_tokens
        )
        self.stops = StopChecker(seq.params.stop, seq.params.include_stop_str_in_output)
        self.special_ids = frozenset(tokenizer.all_special_ids)
        self.prompt_logprobs: list[float] = []  # filled by the engine as prompt chunks run
        self.prompt_ranks: list[int] = []  # likewise, with `prompt_top_n_tokens`
        self.prompt_tops: list[tuple[list[int], list[float]]] = []
        self.first_scheduled: float | None = None
        self.arrival = time.monotonic()
        self.num_emitted = 0  # output tokens turned into events (a step may append several: speculation)

    def on_token(
        self, token_id: int, logprob: float, tops: tuple[list[int], list[float]] | None = None
    ) -> TokenEvent:
        seq, params = self.seq, self.seq.params
        self.num_emitted += 1
        n = self.num_emitted  # output tokens up to this one (the scheduler may have appended more)
        reason = token_finish_reason(token_id, n, params, self.eos_token_ids)
        # the token that ended the sequence (EOS, a stop token id) is no text unless asked, as vLLM's
        # detokenizer leaves it out (skipped special tokens would decode to nothing anyway)
        ended_by_token = reason == FinishReason.EOS
        text = (
            "" if ended_by_token and not params.include_stop_str_in_output else self.detokenizer.add(token_id)
        )
        if reason is not None:
            text += self.detokenizer.flush()
        check = self.stops.add(text, can_stop=stop_sequences_allowed(n, params))
        reason = combine_finish_reasons(reason, check.stopped)
        text = check.text
        if reason is not None and not check.stopped:
            text += self.stops.flush()
        event = TokenEvent(
            request_id=seq.request_id,
            index=n - 1,
            token_id=token_id,
            token_text=self.detokenizer.token_text(token_id),
            text=text,
            logprob=logprob,
            special=token_id in self.special_ids,
            top_tokens=self._top_tokens(tops) if tops else (),
            finish_reason=reason,
        )
        if reason is None:
            return event
        now = time.monotonic()
        first = self.first_scheduled or now
        return dataclasses.replace(
            event,
            generated_text=self.stops.text,
            stop_sequence=self.stops.stop_sequence,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_cached_tokens=seq.num_cached_prompt_tokens,
            prompt_tokens=self._prompt_tokens() if params.prompt_logprobs else None,
            seed=seq.seed if params.do_sample else None,
            queue_time=first - self.arrival,
            inference_time=now - first,
        )

    def on_pooled(self, result: list[float] | list[list[float]]) -> TokenEvent:
        """A pooling request's one event, no token (`index` and `token_id` -1): its pooled vector, or for a
        token-embeddings request (`Sequence.token_embeddings`) its prompt's tokens' hidden states."""
        seq, now = self.seq, time.monotonic()
        tokens = seq.token_embeddings
        first = self.first_scheduled or now
        return TokenEvent(
            request_id=seq.request_id,
            index=-1,
            token_id=-1,
            token_text="",
            text="",
            logprob=None,
            special=False,
            finish_reason=FinishReason.LENGTH,  # the prompt was the whole of it
            generated_text="",
            num_prompt_tokens=seq.num_prompt_tokens,
            queue_time=first - self.arrival,
            inference_time=now - first,
            embedding=None if tokens else tuple(result),
            token_embeddings=tuple(tuple(t) for t in result) if tokens else None,
        )

    def _top_tokens(self, tops: tuple[list[int], list[float]]) -> tuple[TopToken, ...]:
        ids, logprobs = tops
        text = self.detokenizer.token_text
        # a token the step could never take (masked by a grammar, banned, not allowed) is no alternative: its
        # logprob is -inf, which JSON cannot carry either
        return tuple(
            TopToken(i, text(i), lp, i in self.special_ids)
            for i, lp in zip(ids, logprobs, strict=True)
            if lp != -math.inf
        )

    def add_prompt_logprobs(self, output: StepOutput) -> None:
        """A step's prompt logprobs of this request (its next prompt tokens'), ranks and top tokens included."""
        rid = self.seq.request_id
        self.prompt_logprobs.extend(output.prompt_logprobs[rid])
        if rid in output.prompt_ranks:
            self.prompt_ranks.extend(output.prompt_ranks[rid])
            tops = zip(output.prompt_top_token_ids[rid], output.prompt_top_logprobs[rid], strict=True)
            self.prompt_tops.extend(tops)

    def _prompt_tokens(self) -> tuple[PromptToken, ...]:
        ids = self.seq.prompt_token_ids
        text = self.detokenizer.token_text
        tokens = [PromptToken(ids[0], text(ids[0]), None)] if ids else []
        for j, (t, lp) in enumerate(zip(ids[1:], self.prompt_logprobs, strict=False)):
            if j < len(self.prompt_ranks):
                tokens.append(
                    PromptToken(t, text(t), lp, self.prompt_ranks[j], self._top_tokens(self.prompt_tops[j]))
                )
            else:
                tokens.append(PromptToken(t, text(t), lp))
        return tuple(tokens)
