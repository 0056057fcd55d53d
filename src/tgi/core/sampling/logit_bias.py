"""OpenAI's `logit_bias` as device tensors, built once per request and reused at every step.

A request's `(token id, bias)` pairs never change while it runs; building their index and value tensors
from the Python pairs at every step costs a host-to-device copy per row per step (milliseconds for a few
thousand pairs). `LogitBiasTable` builds them the first time a request's `SamplingParams` is sampled and
keeps them while that `SamplingParams` object lives (the engine's `Sequence` holds it until the request
ends; a weak reference drops the tensors then).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tgi.core.sampling_params import SamplingParams


@dataclass(frozen=True)
class _BiasTensors:
    owner: weakref.ref  # the SamplingParams they were built from
    device: torch.device
    ids: torch.Tensor  # [K] int64 token ids
    values: torch.Tensor  # [K] float32 biases


class LogitBiasTable:
    """Each live request's `logit_bias` tensors, keyed by its `SamplingParams` object (on one thread: the
    sampler's)."""

    def __init__(self) -> None:
        self._tensors: dict[int, _BiasTensors] = {}
        self.num_built = 0  # tensors built since start (one per request and device)

    def __len__(self) -> int:
        return len(self._tensors)

    def tensors(self, params: SamplingParams, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """`params.logit_bias` as `([K] int64 ids, [K] float32 values)` on `device`, built on first use."""
        key = id(params)
        entry = self._tensors.get(key)
        if entry is None or entry.owner() is not params or entry.device != device:
            pairs = params.logit_bias
            entry = _BiasTensors(
                weakref.ref(params, self._forget(key)),
                device,
                torch.tensor([t for t, _ in pairs], dtype=torch.int64).to(device, non_blocking=True),
                torch.tensor([b for _, b in pairs], dtype=torch.float32).to(device, non_blocking=True),
            )
            self._tensors[key] = entry
            self.num_built += 1
        return entry.ids, entry.values

    def _forget(self, key: int):
        def forget(ref: weakref.ref) -> None:
            entry = self._tensors.get(key)
            if entry is not None and entry.owner is ref:  # not a newer object that took the same id
                self._tensors.pop(key, None)

        return forget

    def apply(self, logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
        """Add row i's `params[i].logit_bias` to `logits[i]` (`[N, V]`, token ids in [0, V)) with one
        scatter over all rows. In place."""
        rows, ids, values = [], [], []
        for i, p in enumerate(params):
            if p.logit_bias:
                row_ids, row_values = self.tensors(p, logits.device)
                rows.append((i, len(p.logit_bias)))
                ids.append(row_ids)
                values.append(row_values)
        if not rows:
            return logits
        device = logits.device
        index = torch.tensor([i for i, _ in rows], dtype=torch.int64).to(device, non_blocking=True)
        counts = torch.tensor([k for _, k in rows], dtype=torch.int64).to(device, non_blocking=True)
        total = sum(k for _, k in rows)  # given, so that a GPU need not wait to learn the output's size
        return logits.index_put_(
            (index.repeat_interleave(counts, output_size=total), torch.cat(ids)),
            torch.cat(values).to(logits.dtype),
            accumulate=True,
        )
