"""One request's state as the scheduler sees it: tokens, KV progress, blocks (no torch here).

Like vLLM v1 there are no prefill and decode modes: a sequence has `num_tokens` known tokens (prompt plus
generated) of which `num_computed_tokens` have their keys/values in the cache. Each step the scheduler feeds
some of the rest; when the fed chunk reaches the last known token, the runner samples the next one.
"""

from __future__ import annotations

import time
from enum import Enum

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.request import EngineRequest, FinishReason, ImageInput
from tgi.core.sampling_params import SamplingParams

#: the most decode steps a sequence whose guesses keep failing goes without guesses between two tries
MAX_SPEC_BACKOFF = 16


class SequenceStatus(Enum):
    WAITING = "waiting"  # queued: never scheduled, or preempted (blocks dropped, to be recomputed)
    RUNNING = "running"  # holds KV blocks; gets tokens scheduled each step
    FINISHED = "finished"  # stopped or cancelled; holds nothing


class Sequence:
    """A request's tokens and scheduling state.

    Contract: `token_ids` is one list the scheduler appends sampled tokens to; the first
    `num_prompt_tokens` of it are the prompt. `block_table` always covers at least `num_computed_tokens`
    tokens. Preemption (recomputation) clears `block_table` and `num_computed_tokens` but never touches the
    tokens: they are fed again as a prefill, and the next sample continues the output where it stopped.
    """

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams | None = None,
        seed: int = 0,
        arrival_time: float | None = None,
        cache_key: bytes = b"",
        images: tuple[ImageInput, ...] = (),
        pooling: bool = False,
        token_embeddings: bool = False,
    ) -> None:
        if not prompt_token_ids:
            raise ValueError(f"request {request_id!r}: the prompt must have at least one token")
        self.request_id = request_id
        self.token_ids: list[int] = list(prompt_token_ids)  # prompt + output; appended to in place
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params if params is not None else SamplingParams()
        self.seed = seed
        self.arrival_time = time.monotonic() if arrival_time is None else arrival_time
        self.arrival_index = -1  # set by the scheduler on `add`: breaks ties of arrival_time, FIFO order
        self.num_computed_tokens = 0  # tokens whose keys/values are in the cache
        self.block_table: list[int] = []  # physical KV block ids, in position order
        self.status = SequenceStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self.first_scheduled_time: float | None = None
        self.num_preemptions = 0
        # Prompt positions [0, prompt_logprobs_upto) were fed in chunks that returned prompt logprobs; a
        # recomputation must not ask for them again (see ChunkPolicy.chunk_len).
        self.prompt_logprobs_upto = 0
        # Prefix caching (see BlockManager). `cache_key`: anything besides the tokens that changes this
        # request's keys/values (a LoRA adapter id, a tenant salt); blocks are shared only between equal keys.
        self.cache_key = cache_key
        # the prompt's images (placeholders at `offset` .. `offset + num_tokens - 1`), in prompt order: fed to the
        # runner with every prefill chunk (a recomputation after preemption too); their `content_hash`es key the
        # prefix-cache blocks that hold their placeholders
        self.images = images
        # a pooling request (embeddings): its prompt is fed, pooled by the runner and the request ends; it never
        # samples (`ScheduledSequence.pool` in place of `sample`)
        self.pooling = pooling
        self.token_embeddings = token_embeddings  # with `pooling`: every token's hidden state, unpooled
        self.block_hashes: list[bytes] = []  # chained hashes of the full blocks of token_ids, grown lazily
        self.num_registered_blocks = 0  # leading block_table blocks already offered to the prefix cache
        self.num_cached_prompt_tokens = 0  # prompt tokens read from the cache when first scheduled
        # Speculative decoding: guesses of the next tokens, set before a step and fed (verified) with the last
        # token when the sequence decodes; `new_token_rows`: the rows of the last step's `StepOutput` that
        # hold the tokens its `update` appended (1, or more when guesses were accepted)
        self.draft_token_ids: list[int] = []
        self.new_token_rows = range(0)
        self.num_accepted_drafts = 0  # over the request's life
        self.num_rejected_drafts = 0  # guesses fed and refused, over the request's life
        # after guesses that all failed, the next `spec_wait` decodes go unguessed; `spec_backoff` doubles
        # with each such failure (up to MAX_SPEC_BACKOFF) and is reset by an accepted guess
        self.spec_backoff = 0
        self.spec_wait = 0

    @property
    def num_new_tokens(self) -> int:
        """Tokens the last `Scheduler.update` appended."""
        return len(self.new_token_rows)

    # ---- tokens -------------------------------------------------------------------------------------
    @property
    def priority(self) -> int:
        return self.params.priority

    @property
    def want_prompt_logprobs(self) -> bool:
        return self.params.prompt_logprobs

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt + output, the live list (do not mutate; use `append_token`)."""
        return self.token_ids

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        """Known tokens whose keys/values are not yet in the cache (>= 1 while the sequence is live)."""
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_decode(self) -> bool:
        """Only the last sampled token is left to feed: the next step is a plain decode of one token.
        (The last token of a recomputation counts as a decode too: same work, same result.)"""
        return self.num_uncomputed_tokens == 1 and self.num_computed_tokens >= self.num_prompt_tokens

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)

    def scheduled(self, n: int, is_prefill: bool) -> ScheduledSequence:
        """This sequence's part of a step: its next `n` tokens from `num_computed_tokens` (a decode of more
        than one: its last known token and its draft guesses), what the runner needs with them."""
        start = self.num_computed_tokens
        drafts = self.draft_token_ids if self.is_decode and n > 1 else []
        known = n - len(drafts)
        ends = start + known == self.num_tokens
        return ScheduledSequence(
            request_id=self.request_id,
            token_ids=self.token_ids[start : start + known] + drafts,
            start_pos=start,
            block_table=tuple(self.block_table),
            is_prefill=is_prefill,
            sample=ends and not self.pooling,
            pool=ends and self.pooling,
            token_embeddings=self.token_embeddings,
            num_draft_tokens=len(drafts),
            sampling=self.params,
            seed=self.seed,
            num_prompt_tokens=self.num_prompt_tokens,
            all_token_ids=self.token_ids,  # live list, valid for the step (runners keep no reference)
            want_prompt_logprobs=(
                self.want_prompt_logprobs and start == self.prompt_logprobs_upto < self.num_prompt_tokens
            ),
            images=self.images if is_prefill else (),
        )

    @classmethod
    def of_request(cls, request_id: str, request: EngineRequest, seed: int, cache_key: bytes) -> Sequence:
        """The sequence of a validated request (`LLMEngine.validate`): its prompt, parameters, images and
        pooling, with its resolved `seed` and prefix-cache `cache_key`."""
        return cls(
            request_id,
            list(request.prompt_token_ids),
            request.params,
            seed,
            cache_key=cache_key,
            images=request.images,
            pooling=request.pooling,
            token_embeddings=request.token_embeddings,
        )

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, {self.status.name}, tokens={self.num_tokens} "
            f"(prompt {self.num_prompt_tokens}), computed={self.num_computed_tokens}, "
            f"blocks={len(self.block_table)})"
        )
