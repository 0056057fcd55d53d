"""Logits processing and token selection."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from tgi.core.batch import ScheduledSequence


@dataclass
class SamplerOutput:
    """One row per sampled sequence."""

    token_ids: torch.Tensor  # [N] int64
    logprobs: torch.Tensor  # [N] float32: log-probability of the chosen token (see Sampler.sample)
    top_token_ids: torch.Tensor | None = None  # [N, n] int64, n = max top_n_tokens in the batch
    top_logprobs: torch.Tensor | None = None  # [N, n] float32


class Sampler(ABC):
    """Turns a batch of next-token logits into tokens, vectorised over the batch.

    Contract: row i of `logits` belongs to `rows[i]`. Penalties (repetition, frequency, presence) read the
    row's token history; `temperature`, `top_k`, `top_p`, `typical_p` shape the distribution when
    `do_sample`, otherwise the choice is the argmax of the penalised logits. Reported logprobs are the
    log-softmax of the penalised, temperature-scaled logits (before top-k/top-p/typical truncation). A seeded
    row draws the same token for the same (seed, step, logits) whatever the other rows are.
    """

    @abstractmethod
    def sample(self, logits: torch.Tensor, rows: Sequence[ScheduledSequence]) -> SamplerOutput:
        """`logits` [N, vocab] float32, one row per entry of `rows`."""
