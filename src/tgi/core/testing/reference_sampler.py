"""A sampler written plainly, one row and one token at a time in float64 Python arithmetic: the reference
every sampler is compared with (core's vectorised `TorchSampler` included, and samplers of other
frameworks: it takes logits as any array with `tolist()`, or nested lists, and imports no framework).

It is written from the specification in `tgi.core.interfaces.sampling` (parameters, order of processors,
counter-based seeding), not from `tgi.core.sampling`: DRY by its definition (every earlier position compared
with the end, quadratic in the window), bad words and allowed tokens token by token. Logits processors are
framework code; a case that selects some gives their plain-Python twins (`PlainProcessor`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tgi.core.interfaces.sampling import uniform_noise, watermark_uniform, xtc_uniform

if TYPE_CHECKING:
    from tgi.core.interfaces.batch import ScheduledSequence, TokenMasks

__all__ = ["PlainProcessor", "ReferenceDraw", "allowed_tokens", "reference_sample", "uniform_noise"]

#: a logits processor's plain-Python twin: (the row's logits, the row, its arguments) -> new logits
PlainProcessor = Callable[[list[float], "ScheduledSequence", Mapping[str, Any]], list[float]]


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


def _dry(x: list[float], row: ScheduledSequence) -> list[float]:
    """DRY by its definition: the longest repeat each token would extend, compared position by position."""
    p = row.sampling
    if p.dry_multiplier <= 0 or p.dry_penalty_last_n == 0:
        return x
    w = list(row.all_token_ids)
    if 0 < p.dry_penalty_last_n < len(w):
        w = w[len(w) - p.dry_penalty_last_n :]
    n, allowed = len(w), p.dry_allowed_length
    if n <= allowed:
        return x
    limit = n
    for i in range(n):  # walking back from the last token to the first breaker
        at = n - 1 - i
        tails = [
            len(b) - 1
            for b in p.dry_sequence_breaker_ids
            if b[0] == w[at] and len(b) - 1 <= i and list(b[1:]) == w[at + 1 : at + len(b)]
        ]
        if tails:
            limit = i - max(tails)
            break
    if limit < allowed:
        return x
    longest: dict[int, int] = {}
    for j in range(n - 1):
        m = 0
        while m <= j and w[j - m] == w[n - 1 - m]:
            m += 1
        m = min(m, limit)
        if m >= allowed:
            longest[w[j + 1]] = max(longest.get(w[j + 1], 0), m)
    alone = {b[0] for b in p.dry_sequence_breaker_ids if len(b) == 1}
    cap = math.floor(88.7228391 / math.log(p.dry_base)) if p.dry_base > 1.000001 else 0
    for t, m in longest.items():
        if t not in alone and 0 <= t < len(x):
            e = min(m - allowed, cap) if cap > 0 else m - allowed
            try:
                x[t] -= p.dry_multiplier * p.dry_base**e
            except OverflowError:
                x[t] = -math.inf
    return x


def _top_n_sigma(x: list[float], n_sigma: float) -> list[float]:
    finite = [v for v in x if v != -math.inf]
    mean = sum(finite) / len(finite)
    std = math.sqrt(sum((v - mean) ** 2 for v in finite) / len(finite))
    return [v if v >= max(finite) - n_sigma * std else -math.inf for v in x]


def _min_p(x: list[float], min_p: float) -> list[float]:
    """Tokens whose probability is below min_p x the largest become -inf (probabilities, as vLLM writes it)."""
    probs = _probabilities(x, [t for t in range(len(x)) if x[t] != -math.inf])
    top = max(probs.values())
    return [v if probs.get(t, 0.0) >= min_p * top else -math.inf for t, v in enumerate(x)]


def _xtc(x: list[float], kept: list[int], row: ScheduledSequence) -> list[int]:
    p = row.sampling
    if p.xtc_probability <= 0 or xtc_uniform(row.seed, row.num_generated) > p.xtc_probability:
        return kept
    probs = _probabilities(x, kept)
    top = [t for t in kept if x[t] != -math.inf and probs[t] >= p.xtc_threshold]
    if len(top) < 2:
        return kept
    least = min(probs[t] for t in top)
    return [t for t in kept if t not in top or probs[t] <= least]


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


def _masked(values: list[float], row: ScheduledSequence) -> list[float]:
    """`allowed_token_ids`, then the last token of each bad word whose other tokens were just generated."""
    params = row.sampling
    if params.allowed_token_ids is not None:
        allowed = set(params.allowed_token_ids)
        values = [v if t in allowed else -math.inf for t, v in enumerate(values)]
    out = list(row.all_token_ids[row.num_prompt_tokens :])
    for word in params.bad_words_ids:
        if len(word) - 1 <= len(out) and list(word[:-1]) == out[len(out) - len(word) + 1 :]:
            values[word[-1]] = -math.inf
    return values


def reference_sample(
    logits: Any,
    rows: Sequence[ScheduledSequence],
    token_masks: TokenMasks | None = None,
    processors: Mapping[str, PlainProcessor] | None = None,
) -> ReferenceDraw:
    """The token and logprob `tgi.core.interfaces.sampling` gives each row of `logits` [N, vocab] (read
    as float64), with `token_masks` (guided decoding) applied first; `processors`: the plain twins of the
    logits processors the rows select, by name."""
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
        values = _masked(list(values), row)
        for t, bias in params.logit_bias:  # -inf (masked) stays -inf
            values[t] += bias
        for choice in params.logits_processors:
            values = list((processors or {})[choice.name](values, row, choice.args))
        x = _dry(_penalised(values, row), row)
        if params.watermark is not None:
            prev, mark = row.all_token_ids[-1], params.watermark
            x = [v + mark.delta if watermark_uniform(prev, t) < mark.gamma else v for t, v in enumerate(x)]
        if params.do_sample:
            x = [v / params.temperature for v in x]
            y = _top_n_sigma(x, params.top_n_sigma) if params.top_n_sigma > 0 else x
            y = _min_p(y, params.min_p) if params.min_p > 0 else y
            kept = _xtc(y, _kept(y, params.top_k, params.top_p, params.typical_p), row)
            noise = uniform_noise(row.seed, row.num_generated, len(x))
            token = max(kept, key=lambda t: (y[t] - math.log(-math.log(noise[t])), -t))
        else:
            token = max(range(len(x)), key=lambda t: (x[t], -t))  # the first maximum
        out.token_ids.append(token)
        out.logprobs.append(x[token] - _logsumexp(x))
    return out
