"""What the scheduler hands a model runner each step, and what comes back: part of the backend contract
(versioned by `INTERFACE_VERSION`; no torch here).

The scheduler sees integers only: token ids, positions, block ids. A runner turns a `ScheduledBatch` into
device tensors, runs the model and the sampler, and returns a `StepOutput`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tgi.core.sampling_params import SamplingParams

if TYPE_CHECKING:
    from tgi.core.request import ImageInput


#: the token id of a decode whose token was sampled by the step before and is not on the host yet (overlapped
#: steps, `RunnerCapabilities.async_steps`): the runner feeds the token it sampled for that request in its
#: previous step. Only ever the last of a sequence's tokens, and only for sampling that reads no token history
#: (no penalties, DRY, bad words, logits processors, watermark, grammar or guesses), so `all_token_ids` may
#: end with it.
PENDING_TOKEN = -1


@dataclass(frozen=True)
class ScheduledSequence:
    """One sequence's share of a step: a prompt chunk (prefill) or one decode token."""

    request_id: str
    token_ids: Sequence[int]  # the tokens fed this step, at positions start_pos .. start_pos+len-1
    start_pos: int  # tokens of this sequence already in the KV cache (the chunk attends to them)
    block_table: Sequence[int]  # physical KV blocks, enough for start_pos + len(token_ids) tokens
    is_prefill: bool  # True: prompt chunk or recomputation after preemption; False: a decode (one token,
    # or the last token and its guesses: `num_draft_tokens`)
    sample: bool  # True when the runner must sample a token after the last position of this chunk
    sampling: SamplingParams
    seed: int  # resolved seed: the request's, or one drawn at arrival (sampling reproducibility)
    num_prompt_tokens: int  # length of the prompt within all_token_ids
    all_token_ids: Sequence[int]  # prompt + generated so far (penalties read it; do not mutate)
    want_prompt_logprobs: bool = False  # return logprobs of token_ids[1:] and of the next prompt token
    # speculative decoding: the last `num_draft_tokens` of `token_ids` are guesses of the next tokens, fed
    # after the sequence's last token in a decode of several query tokens (each attends to the positions
    # up to its own, as one decode each would); the runner samples at every position, position j as if
    # the guesses before it had been drawn (`draft_rows`)
    num_draft_tokens: int = 0
    # the prompt's images (`tgi.core.request.ImageInput`, in prompt order), on every prefill chunk of a
    # request that has any: a runner that takes images (`RunnerCapabilities.image_inputs`) puts their
    # encoder output in place of the placeholders this chunk feeds
    images: Sequence[ImageInput] = ()
    # a pooling request's chunk that ends its prompt (`RunnerCapabilities.pooling`): the runner returns the
    # pooled hidden state of the whole prompt in `StepOutput.pooled` and samples nothing (`sample` is False);
    # such a prompt is fed in one chunk (a pooling runner declares `RunnerConstraints.chunked_prefill=False`)
    pool: bool = False
    # with `pool`: no pooling, the final hidden state of every token of the prompt, in order, in
    # `StepOutput.token_embeddings` (TEI's `/embed_all`; only from a runner whose capabilities say
    # `token_embeddings`); never on a classifier
    token_embeddings: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_generated(self) -> int:
        return len(self.all_token_ids) - self.num_prompt_tokens

    def draft_rows(self) -> list[ScheduledSequence]:
        """The rows to sample for this sequence: itself, then one per guess, each with the guesses before
        it in its history (so penalties and seeded draws see what a plain decode would)."""
        k = self.num_draft_tokens
        if not k:
            return [self]
        drafts = list(self.token_ids[-k:])
        history = list(self.all_token_ids)
        return [self] + [
            dataclasses.replace(self, all_token_ids=history + drafts[:j], num_draft_tokens=0)
            for j in range(1, k + 1)
        ]


@dataclass(frozen=True)
class TokenMasks:
    """The tokens some sampled rows may take (guided decoding), as bits: token `t` of row `rows[j]` is
    allowed when bit `t % 32` of `bitmask[j, t // 32]` is set. `rows` index the rows the sampler gets (the
    sequences with `sample=True`, in batch order); other rows are unconstrained. `bitmask` is a numpy int32
    array `[len(rows), ceil(vocab_size / 32)]` (no framework tensor: a backend converts it)."""

    rows: tuple[int, ...]
    bitmask: Any  # numpy.ndarray [len(rows), words] int32
    vocab_size: int

    def at_positions(self, sampled: Sequence[ScheduledSequence]) -> TokenMasks:
        """These masks indexed by sampled position instead of sampled sequence, for a runner that samples
        every position of a sequence with guesses (`ScheduledSequence.draft_rows`); itself when no sequence
        has guesses. A constrained sequence has none (the engine guesses for no grammar request)."""
        if not any(s.num_draft_tokens for s in sampled):
            return self
        first, row = [], 0
        for s in sampled:
            first.append(row)
            row += s.num_draft_tokens + 1
        return dataclasses.replace(self, rows=tuple(first[i] for i in self.rows))


@dataclass
class ScheduledBatch:
    """A step's work. Prefill chunks come first, then decode tokens, so a runner can split the flat token
    axis at `num_prefill_tokens` without sorting."""

    step: int  # monotonically increasing step counter
    sequences: list[ScheduledSequence]  # prefill chunks first, then decodes
    num_prefill_seqs: int  # sequences[:num_prefill_seqs] are prefills
    freed_request_ids: list[str] = field(default_factory=list)  # finished/preempted/cancelled since last step
    token_masks: TokenMasks | None = None  # the grammar masks of constrained rows (set by the engine)

    @property
    def num_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.sequences)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.sequences[: self.num_prefill_seqs])

    @property
    def is_empty(self) -> bool:
        return not self.sequences


@dataclass
class StepOutput:
    """Columnar results of one step, aligned with the batch's sequences that had `sample=True`: one row
    per sampled position, so a sequence with guesses to verify has `num_draft_tokens + 1` consecutive rows
    (in position order)."""

    request_ids: list[str]  # sequences that produced a token, in batch order
    token_ids: list[int]  # the sampled token of each
    logprobs: list[float]  # log-probability of that token under the (processed) distribution
    top_token_ids: list[list[int]] | None = None  # per row, the top-n alternatives (if any row asked)
    top_logprobs: list[list[float]] | None = None
    # request_id -> logprobs of the prompt tokens at positions start_pos+1 .. min(start_pos+len,
    # num_prompt_tokens-1), so that over all chunks every prompt token but the first gets exactly one;
    # only for sequences with want_prompt_logprobs. Position 0 has no logprob (TGI reports null).
    prompt_logprobs: dict[str, list[float]] = field(default_factory=dict)
    # aligned with prompt_logprobs[request_id], only for sequences whose `sampling.prompt_top_n_tokens` is not
    # None (from runners with `RunnerCapabilities.prompt_top_logprobs`): each prompt token's rank in its
    # position's distribution (1 + the tokens with a strictly greater logprob), and the
    # `prompt_top_n_tokens` most likely tokens there with their logprobs, most likely first
    prompt_ranks: dict[str, list[int]] = field(default_factory=dict)
    prompt_top_token_ids: dict[str, list[list[int]]] = field(default_factory=dict)
    prompt_top_logprobs: dict[str, list[list[float]]] = field(default_factory=dict)
    # Medusa heads (speculative decoding): per row, the heads' guesses of the tokens after the drawn one
    guesses: list[list[int]] | None = None
    # seconds this step spent in the vision encoder (images whose placeholders it started feeding), the
    # device's work included; 0.0 for a step that encoded no image or a runner without a vision tower
    encoder_seconds: float = 0.0
    # request_id -> the pooled vector (`tgi.core.interfaces.pooling.PoolingSpec`, before normalization, float32
    # values) of each sequence with `pool=True` and not `token_embeddings`
    pooled: dict[str, list[float]] = field(default_factory=dict)
    # request_id -> the final hidden state of each token of the prompt ([L][H] float32 values, in prompt order,
    # as the pooling reads them: after the model's last norm) of each sequence with `pool` and
    # `token_embeddings`
    token_embeddings: dict[str, list[list[float]]] = field(default_factory=dict)
