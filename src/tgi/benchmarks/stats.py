"""Percentiles and summaries (pure Python; numpy's default linear interpolation)."""

from __future__ import annotations

import math
from collections.abc import Sequence

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) with linear interpolation between closest ranks; NaN when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(values: Sequence[float], scale: float = 1.0) -> dict[str, float | None]:
    """mean, p50, p90, p99, min, max of `values` × `scale` (e.g. 1000 for seconds -> ms); None when empty."""
    if not values:
        return {k: None for k in ("mean", *(f"p{p}" for p in PERCENTILES), "min", "max")}
    out: dict[str, float | None] = {"mean": sum(values) / len(values) * scale}
    for p in PERCENTILES:
        out[f"p{p}"] = percentile(values, p) * scale
    out["min"] = min(values) * scale
    out["max"] = max(values) * scale
    return out
