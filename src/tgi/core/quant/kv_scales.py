"""A checkpoint's KV cache scales: the per-layer `k_scale` / `v_scale` that float8 checkpoints ship for a
float8 KV cache (vLLM's and llm-compressor's `self_attn.k_scale`; AutoFP8's older `k_proj.output_scale`; a
single `self_attn.kv_scale` for both), taken out of the weight stream before the model's loader sees them.

With `--kv-cache-dtype fp8_e4m3fn` or `fp8_e5m2` they become `KVCacheSpec.kv_scales`: every token is stored
as value / scale. Without them, and always for int8, each token's scale is computed when it is written.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tgi.core.interfaces.types import KVCacheSpec

#: checkpoint name endings -> which scale they are: 0 keys, 1 values, 2 both
_SUFFIXES = {
    ".self_attn.k_scale": 0,
    ".self_attn.v_scale": 1,
    ".self_attn.attn.k_scale": 0,
    ".self_attn.attn.v_scale": 1,
    ".self_attn.k_proj.output_scale": 0,
    ".self_attn.v_proj.output_scale": 1,
    ".self_attn.kv_scale": 2,
}
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _which(name: str) -> tuple[int, int] | None:
    """(layer index, 0 keys / 1 values / 2 both) of a KV scale's checkpoint name, or None for another."""
    for suffix, which in _SUFFIXES.items():
        if name.endswith(suffix):
            m = _LAYER.search(name)
            if m is not None:
                return int(m.group(1)), which
    return None


class KVScales:
    """The KV scales one load found: `take` filters the checkpoint's stream, `apply` puts them in the cache's
    spec. Layer indices are the checkpoint's (a pipeline stage holds a range of them)."""

    def __init__(self) -> None:
        self.found: dict[int, list[float | None]] = {}  # layer -> [k_scale, v_scale]

    def selecting(self, select: Callable[[str], object] | None) -> Callable[[str], object] | None:
        """`select` (what a rank reads of each tensor) reading the KV scales whole: a tensor-parallel rank's
        slicing would cut a scalar."""
        if select is None:
            return None

        def selected(name: str) -> object:
            wanted = select(name)
            return bool(wanted) if _which(name) is not None else wanted

        return selected

    def take(self, weights: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        """`weights` without the KV scales, which are kept here (as floats)."""
        for name, tensor in weights:
            which = _which(name)
            if which is None:
                yield name, tensor
                continue
            layer, part = which
            value = float(tensor.float().reshape(-1).max())  # a per-tensor scale (the largest of several)
            pair = self.found.setdefault(layer, [None, None])
            for i in (0, 1) if part == 2 else (part,):
                pair[i] = value

    def for_layers(self, layers: Iterable[int]) -> tuple[tuple[float, float], ...]:
        """(k_scale, v_scale) of each of `layers`, or () when the checkpoint has none; ValueError naming the
        layers that lack one when it has some."""
        layers = list(layers)
        if not self.found:
            return ()
        missing = [i for i in layers if None in self.found.get(i, [None])]
        if missing:
            raise ValueError(
                f"the checkpoint's KV cache scales (k_scale, v_scale) are missing for layers {missing}"
            )
        bad = [i for i in layers if not all(s > 0 for s in self.found[i])]
        if bad:
            raise ValueError(f"the checkpoint's KV cache scales of layers {bad} are not > 0")
        return tuple((self.found[i][0], self.found[i][1]) for i in layers)

    def apply(self, spec: KVCacheSpec, kv_dtype: str, layers: Iterable[int]) -> KVCacheSpec:
        """`spec` storing `kv_dtype`, with the checkpoint's scales of `layers` when it is a float8 cache."""
        scales = self.for_layers(layers) if kv_dtype.startswith("fp8") else ()
        return dataclasses.replace(spec, kv_dtype=kv_dtype, kv_scales=scales)
