"""Watermarking ("A Watermark for Large Language Models", Kirchenbauer et al., 2023), as TGI's `watermark`.

A watermarked request adds `delta` to the logits of a green list of tokens at every step; the green list
is picked by the previous token (`tgi.core.interfaces.sampling.watermark_uniform`: a token is green with
probability `gamma`). The detector needs no model, only the token ids: in watermarked text far more than
a share `gamma` of the tokens are green after their predecessor, and the one-proportion z-score

    z = (green - gamma * T) / sqrt(T * gamma * (1 - gamma))

over the T scored tokens says by how many standard deviations. The green list is a pure function of the two
token ids, so text made on any device or framework is detected anywhere (TGI's green lists come from a
device's `torch.Generator` and are not, TGI #2474).

No torch here: the samplers apply the watermark (`tgi.core.sampling.processors.apply_watermark`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tgi.core.interfaces.sampling import watermark_uniform

DEFAULT_GAMMA = 0.5  # TGI's defaults (`--watermark-gamma`, `--watermark-delta`)
DEFAULT_DELTA = 2.0


@dataclass(frozen=True)
class Watermark:
    """The watermark a request's tokens carry: a share `gamma` of the vocabulary is green at each step and
    `delta` is added to the green tokens' logits."""

    gamma: float = DEFAULT_GAMMA  # in (0, 1)
    delta: float = DEFAULT_DELTA  # > 0

    def validate(self) -> None:
        """`ValueError` with a user-facing message when out of range."""
        if not 0.0 < self.gamma < 1.0:
            raise ValueError(f"the watermark's gamma must be in (0, 1), got {self.gamma}")
        if not self.delta > 0.0:
            raise ValueError(f"the watermark's delta must be > 0, got {self.delta}")


def is_green(prev_token: int, token: int, gamma: float) -> bool:
    """Whether `token` is in the green list that `prev_token` picks."""
    return watermark_uniform(prev_token, token) < gamma


@dataclass(frozen=True)
class WatermarkScore:
    """What the detector found in a sequence of tokens."""

    z_score: float  # standard deviations above the share `gamma` expected of unwatermarked text
    num_tokens_scored: int  # T: the (previous, token) pairs counted
    num_green: int
    green_fraction: float  # num_green / T (0 when nothing was scored)
    gamma: float

    def as_dict(self) -> dict:
        return {
            "z_score": self.z_score,
            "num_tokens_scored": self.num_tokens_scored,
            "num_green_tokens": self.num_green,
            "green_fraction": self.green_fraction,
            "gamma": self.gamma,
        }


def score_pairs(pairs: Iterable[tuple[int, int]], gamma: float) -> WatermarkScore:
    """The z-score of (previous token, token) pairs."""
    flags = [is_green(p, t, gamma) for p, t in pairs]
    total, green = len(flags), sum(flags)
    if total == 0:
        return WatermarkScore(0.0, 0, 0, 0.0, gamma)
    z = (green - gamma * total) / math.sqrt(total * gamma * (1.0 - gamma))
    return WatermarkScore(z, total, green, green / total, gamma)


def detect_tokens(
    token_ids: Sequence[int], gamma: float = DEFAULT_GAMMA, ignore_repeated_pairs: bool = True
) -> WatermarkScore:
    """The z-score of a token sequence: every token after the first is scored against its predecessor.
    `ignore_repeated_pairs` (Kirchenbauer et al.'s advice) scores each distinct (previous, token) pair once,
    so a passage repeated many times (as small models loop) counts as evidence once, not at every repeat."""
    pairs = list(itertools.pairwise(token_ids))
    if ignore_repeated_pairs:
        pairs = list(dict.fromkeys(pairs))
    return score_pairs(pairs, gamma)


def detect_text(
    text: str, tokenizer, gamma: float = DEFAULT_GAMMA, ignore_repeated_pairs: bool = True
) -> WatermarkScore:
    """The z-score of `text` as `tokenizer` (a Hugging Face tokenizer of the model that wrote it) splits it,
    without special tokens. The first generated token was picked after the prompt's last token, which the
    text alone does not have: it goes unscored."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return detect_tokens(ids, gamma, ignore_repeated_pairs)
