"""Logits processing and token selection on torch tensors (what sampling means: `tgi.core.interfaces.sampling`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from tgi.core.interfaces.batch import ScheduledSequence, TokenMasks


@dataclass
class SamplerOutput:
    """One row per sampled sequence."""

    token_ids: torch.Tensor  # [N] int64
    logprobs: torch.Tensor  # [N] float32: log-probability of the chosen token (see Sampler.sample)
    top_token_ids: torch.Tensor | None = None  # [N, n] int64, n = max top_n_tokens in the batch
    top_logprobs: torch.Tensor | None = None  # [N, n] float32


class Sampler(ABC):
    """Turns a batch of next-token logits into tokens, vectorised over the batch.

    Contract: row i of `logits` belongs to `rows[i]`, and each row gets the token and logprob that
    `tgi.core.interfaces.sampling` specifies (parameters, order of processors, seeding), the same for every
    framework; `tgi.core.testing.reference_sampler` computes it plainly and the conformance suites compare.

    Guided decoding: a sampler that sets `supports_token_masks` applies `token_masks` (the grammar masks of
    some rows, `tgi.core.interfaces.batch.TokenMasks`) before anything else: a row's forbidden tokens are never chosen
    and its logprobs are those of the masked logits. One that does not is never given masks: the engine
    refuses grammar requests on its backend, by name.
    """

    supports_token_masks: bool = False
    #: the `SamplingParams` fields this sampler does not honour (its runner reports them as
    #: `RunnerCapabilities.unsupported_sampling`, and the engine refuses a request that sets one, by name)
    unsupported_sampling: frozenset[str] = frozenset()

    @abstractmethod
    def sample(
        self, logits: torch.Tensor, rows: Sequence[ScheduledSequence], token_masks: TokenMasks | None = None
    ) -> SamplerOutput:
        """`logits` [N, vocab] float32, one row per entry of `rows`; `token_masks` index the same rows."""
