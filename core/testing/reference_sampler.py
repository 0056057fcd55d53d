"""A sampler written plainly, one row and one token at a time in float64 Python arithmetic: the reference
every sampler is compared with (core's vectorised `TorchSampler` included, and samplers of other
frameworks: it takes logits as any array with `tolist()`, or nested lists, and imports no framework).

It is written from the specification in `tgi.core.interfaces.sampling` (parameters, order of processors,
counter-based seeding), not from `tgi.core.sampling`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tgi.core.interfaces.sampling import uniform_noise, watermark_uniform

if TYPE_CHECKING:
    from tgi.core.interfaces.batch import ScheduledSequence, TokenMasks

__all__ = ["ReferenceDraw", "allowed_tokens", "reference_sample", "uniform_noise"]


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


def _rows_of(logits: Any) -> list[list[float]]:
    """`logits` [N, vocab] as N lists of floats: a torch tensor (any device or dtype), a numpy or JAX
    array, or nested sequences."""
    if hasattr(logits, "detach"):  # torch: off the device, and bfloat16 read exactly
        logits = logits.detach().cpu().double()
    values = logits.tolist() if hasattr(logits, "tolist") else logits
    return [[float(v) for v in row] for row in values]


def allowed_tokens(token_masks: TokenMasks, j: int) -> set[int]:
    """The tokens mask row `j` allows: bit `t % 32` of word `t // 32`, read one token at a time."""
    words = [int(w) & 0xFFFFFFFF for w in token_masks.bitmask[j].tolist()]
    return {t for t in range(min(len(words) * 32, token_masks.vocab_size)) if words[t // 32] >> (t % 32) & 1}


def reference_sample(
    logits: Any, rows: Sequence[ScheduledSequence], token_masks: TokenMasks | None = None
) -> ReferenceDraw:
    """The token and logprob `tgi.core.interfaces.sampling` gives each row of `logits` [N, vocab] (read
    as float64), with `token_masks` (guided decoding) applied first."""
    table = _rows_of(logits)
    if len(table) != len(rows) or any(len(row) != len(table[0]) for row in table):
        raise ValueError(f"logits of {len(table)} rows do not match {len(rows)} rows")
    masked = {}
    if token_masks is not None:
        masked = {i: allowed_tokens(token_masks, j) for j, i in enumerate(token_masks.rows)}
    out = ReferenceDraw([], [])
    for i, (values, row) in enumerate(zip(table, rows, strict=True)):
        params = row.sampling
        if i in masked:
            values = [v if t in masked[i] else -math.inf for t, v in enumerate(values)]
        values = list(values)
        for t, bias in params.logit_bias:  # -inf (masked) stays -inf
            values[t] += bias
        x = _penalised(values, row)
        if params.watermark is not None:
            prev, mark = row.all_token_ids[-1], params.watermark
            x = [v + mark.delta if watermark_uniform(prev, t) < mark.gamma else v for t, v in enumerate(x)]
        if params.do_sample:
            x = [v / params.temperature for v in x]
            kept = _kept(x, params.top_k, params.top_p, params.typical_p)
            noise = uniform_noise(row.seed, row.num_generated, len(x))
            token = max(kept, key=lambda t: (x[t] - math.log(-math.log(noise[t])), -t))
        else:
            token = max(range(len(x)), key=lambda t: (x[t], -t))  # the first maximum
        out.token_ids.append(token)
        out.logprobs.append(x[token] - _logsumexp(x))
    return out
