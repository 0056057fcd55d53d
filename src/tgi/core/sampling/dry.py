"""DRY ("don't repeat yourself", llama.cpp's sampler) for one row: which tokens would extend a repetition, and
by how much their logits drop (the definition: `tgi.core.interfaces.sampling`, step 1a). Plain Python, no
framework: samplers of every framework scatter its answer into their logits.

The repeated suffixes are found with the Z-algorithm over the reversed window, as llama.cpp finds them: one
pass, linear in the window's length (the plain definition compares every earlier position with the end,
quadratic in it), so a whole-sequence window of thousands of tokens costs a few milliseconds per step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tgi.core.sampling_params import SamplingParams

#: ln of float32's largest value: `dry_base ** exponent` must stay below it (llama.cpp's cap)
FLOAT_MAX_LOG = 88.7228391


def dry_active(params: SamplingParams) -> bool:
    """Whether DRY changes anything for a request with these parameters."""
    return params.dry_multiplier > 0 and params.dry_penalty_last_n != 0


def _window(tokens: Sequence[int], last_n: int) -> list[int]:
    return list(tokens if last_n < 0 or last_n >= len(tokens) else tokens[len(tokens) - last_n :])


def _limit(w: list[int], breakers: dict[int, tuple[tuple[int, ...], ...]]) -> int:
    """How many tokens follow the last sequence breaker of `w` (`len(w)` when none is in it)."""
    n = len(w)
    for i in range(n):
        tails = breakers.get(w[n - 1 - i])
        if tails is None:
            continue
        longest = -1
        for tail in tails:
            m = len(tail)
            if longest < m <= i and all(tail[k] == w[n - i + k] for k in range(m)):
                longest = m
        if longest >= 0:
            return i - longest
    return n


def _suffix_matches(w: list[int], limit: int) -> list[int]:
    """`out[j]` (j < len(w) - 1): the length of the longest common suffix of `w[:j+1]` and `w`, capped at
    `limit`: the Z-array of `w` reversed, read backwards."""
    n = len(w)
    s = w[::-1]
    z = [0] * n
    left = right = 0  # the Z-box [left, right): s[left:right] == s[:right-left]
    for k in range(1, n):
        m = min(z[k - left], right - k) if k < right else 0
        while k + m < n and s[m] == s[k + m]:
            m += 1
        z[k] = m
        if k + m > right:
            left, right = k, k + m
    return [min(z[n - 1 - j], limit) for j in range(n - 1)]


def dry_penalties(tokens: Sequence[int], params: SamplingParams) -> dict[int, float]:
    """token id -> what DRY subtracts from its logit, for a row whose history is `tokens` (`all_token_ids`:
    prompt and output); empty when DRY is off or nothing repeats long enough."""
    if not dry_active(params):
        return {}
    w = _window(tokens, params.dry_penalty_last_n)
    allowed = params.dry_allowed_length
    if len(w) <= allowed:
        return {}
    breakers = params.dry_breakers
    limit = _limit(w, breakers)
    if limit < allowed:
        return {}
    longest: dict[int, int] = {}
    for j, n in enumerate(_suffix_matches(w, limit)):
        if n >= allowed and n > longest.get(w[j + 1], 0):
            longest[w[j + 1]] = n
    cap = int(FLOAT_MAX_LOG / math.log(params.dry_base)) if params.dry_base > 1.000001 else 0
    out = {}
    for token, n in longest.items():
        if () in breakers.get(token, ()):  # a breaker on its own is never penalised
            continue
        exponent = min(n - allowed, cap) if cap > 0 else n - allowed
        out[token] = dry_penalty(params.dry_multiplier, params.dry_base, exponent)
    return out


def dry_penalty(multiplier: float, base: float, exponent: int) -> float:
    """`multiplier * base ** exponent` in float64, infinite past float64's range (the token is then out)."""
    try:
        return multiplier * base**exponent
    except OverflowError:
        return math.inf
