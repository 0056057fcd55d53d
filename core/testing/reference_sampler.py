"""A sampler written plainly, one row and one token at a time in float64 Python arithmetic: the conformance
suite's reference for every `Sampler` (core's vectorised `TorchSampler` included).

It is written from the `Sampler` contract and TGI's processor order, not from `tgi.core.sampling`:

1. penalties: the repetition penalty (CTRL / TGI) over the prompt and output tokens (a positive logit of a
   seen token is divided by it, any other multiplied), then the frequency and presence penalties (OpenAI)
   over the output tokens only (`logit -= frequency * count + presence`, for tokens with a count);
2. a greedy row (`do_sample=False`) takes the first maximum of the penalised logits;
3. a sampled row divides them by its temperature, keeps its `top_k` best tokens (0: all), then the
   smallest prefix of those whose probability (renormalised over them) reaches `top_p`, then the locally
   typical set: the kept tokens ordered by how far their surprisal is from the entropy, up to and including
   the one whose cumulative probability reaches `typical_p` (and any tied with it);
4. the draw is the Gumbel-max trick with counter-based noise: token `argmax_j x_j - log(-log u_j)` over the
   kept tokens, with `u_j` in (0, 1) a pure function of (row seed, tokens generated so far, j) given by
   `uniform_noise` — so the same seed, step and logits give the same token whatever shares the batch;
5. the reported logprob is the log-softmax, at the chosen token, of the logits after penalties and
   temperature and before any truncation.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from tgi.core.batch import ScheduledSequence

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment
_STREAM = 0xD1B54A32D192ED03  # spreads seeds apart before they are mixed


def _splitmix64(z: int) -> int:
    """The splitmix64 finaliser on an unsigned 64-bit integer."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def uniform_noise(seed: int, step: int, vocab_size: int) -> list[float]:
    """The noise of one row: `u_j` for j in [0, vocab_size), each the top 23 bits of
    `splitmix64(base + (j + 1) * GOLDEN)` mapped to `(bits + 0.5) / 2^23`, where
    `base = splitmix64(splitmix64(seed * STREAM + GOLDEN) + step * GOLDEN)`, all modulo 2^64."""
    base = _splitmix64((_splitmix64((seed * _STREAM + _GOLDEN) & _MASK) + step * _GOLDEN) & _MASK)
    return [
        ((_splitmix64((base + (j + 1) * _GOLDEN) & _MASK) >> 41) + 0.5) / (1 << 23) for j in range(vocab_size)
    ]


@dataclass
class ReferenceDraw:
    """The reference's choice for each row."""

    token_ids: list[int]
    logprobs: list[float]


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _probabilities(x: Sequence[float], tokens: Sequence[int]) -> dict[int, float]:
    """softmax of `x` restricted to `tokens`."""
    lse = _logsumexp([x[t] for t in tokens])
    return {t: math.exp(x[t] - lse) for t in tokens}


def _penalised(x: list[float], row: ScheduledSequence) -> list[float]:
    params = row.sampling
    if params.repetition_penalty != 1.0:
        for t in set(row.all_token_ids):
            if 0 <= t < len(x):
                x[t] = x[t] / params.repetition_penalty if x[t] > 0 else x[t] * params.repetition_penalty
    if params.frequency_penalty != 0.0 or params.presence_penalty != 0.0:
        for t, count in Counter(row.all_token_ids[row.num_prompt_tokens :]).items():
            if 0 <= t < len(x):
                x[t] -= params.frequency_penalty * count + params.presence_penalty
    return x


def _kept(x: list[float], top_k: int, top_p: float, typical_p: float) -> list[int]:
    """The tokens top-k, then top-p, then typical-p leave, best first."""
    kept = sorted(range(len(x)), key=lambda t: -x[t])
    if top_k > 0:
        kept = kept[:top_k]
    if top_p < 1.0:
        probs, mass, nucleus = _probabilities(x, kept), 0.0, []
        for t in kept:
            if nucleus and mass >= top_p:
                break
            nucleus.append(t)
            mass += probs[t]
        kept = nucleus
    if typical_p < 1.0:
        probs = _probabilities(x, kept)
        entropy = -sum(p * math.log(p) for p in probs.values() if p > 0)
        distance = {t: abs(-math.log(probs[t]) - entropy) if probs[t] > 0 else math.inf for t in kept}
        by_distance = sorted(kept, key=lambda t: distance[t])
        mass, last = 0.0, by_distance[-1]
        for t in by_distance:
            mass += probs[t]
            if mass >= typical_p:
                last = t
                break
        kept = [t for t in kept if distance[t] <= distance[last]]
    return kept


def reference_sample(logits: torch.Tensor, rows: Sequence[ScheduledSequence]) -> ReferenceDraw:
    """The token and logprob the `Sampler` contract gives each row of `logits` [N, vocab] (any device or
    dtype; read as float64)."""
    if logits.dim() != 2 or logits.shape[0] != len(rows):
        raise ValueError(f"logits {tuple(logits.shape)} do not match {len(rows)} rows")
    out = ReferenceDraw([], [])
    for values, row in zip(logits.detach().cpu().double().tolist(), rows, strict=True):
        params = row.sampling
        x = _penalised(list(values), row)
        if params.do_sample:
            x = [v / params.temperature for v in x]
            kept = _kept(x, params.top_k, params.top_p, params.typical_p)
            noise = uniform_noise(row.seed % (1 << 64), row.num_generated, len(x))
            token = max(kept, key=lambda t: (x[t] - math.log(-math.log(noise[t])), -t))
        else:
            token = max(range(len(x)), key=lambda t: (x[t], -t))  # the first maximum
        out.token_ids.append(token)
        out.logprobs.append(x[token] - _logsumexp(x))
    return out
