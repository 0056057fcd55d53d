"""The seam a backend fills for LoRA: the low-rank products of a whole batch, grouped by adapter.

Each adapted linear holds its adapters' weights stacked (`LoRAWeights`): slot `i` is adapter `i`, ranks
zero-padded to the largest, parts of a fused linear (q/k/v, gate/up) side by side along the rank axis with
`b` block-structured so that each part lands in its own output rows. Once per step the runner maps every
token of the batch to a slot (-1: no adapter) and `LoRAOps.plan` turns that into whatever the kernel needs;
then every adapted linear calls `LoRAOps.apply(y, x, weights, plan)` with its base output `y`:

    y[t] += (x[t] @ a[slot(t)].T) @ b[slot(t)].T      for every token t with slot(t) >= 0

`TorchLoRAOps` is the reference: one gather, two matmuls and one scatter per adapter present in the batch
(a segmented gather/scatter, the shape of Punica's SGMV), none for tokens without an adapter. A backend with
a fused kernel subclasses `LoRAOps` and returns it from `TorchBackend.lora_ops()`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class LoRAWeights:
    """One linear's adapters, stacked."""

    a: torch.Tensor  # [num_slots, R, in_features]
    b: torch.Tensor  # [num_slots, out_features, R], scaling applied
    present: tuple[bool, ...]  # present[i]: adapter i adapts this linear (else its slot is all zeros)


@dataclass
class TokenGroups:
    """The reference plan: for each adapter in the step, the indices of its tokens."""

    groups: list[tuple[int, torch.Tensor | None]]  # (slot, token indices [n] int64; None: every token)


class LoRAOps(ABC):
    """Batched LoRA products. `plan` runs once per step on the host; `apply` once per adapted linear."""

    @abstractmethod
    def plan(self, token_slots: Sequence[int], device: torch.device) -> object | None:
        """The step's plan from each token's slot (-1 = none), or None when no token has an adapter (then
        `apply` is not called)."""

    @abstractmethod
    def apply(self, y: torch.Tensor, x: torch.Tensor, weights: LoRAWeights, plan: object) -> torch.Tensor:
        """y [T, out] (the base product, may be updated in place) plus every token's adapter delta, for
        x [T, in]; returns the result."""


class TorchLoRAOps(LoRAOps):
    """The reference: per adapter present, gather its tokens, shrink (x A^T), expand (. B^T), scatter-add."""

    def plan(self, token_slots: Sequence[int], device: torch.device) -> TokenGroups | None:
        slots = sorted({s for s in token_slots if s >= 0})
        if not slots:
            return None
        if len(slots) == 1 and all(s == slots[0] for s in token_slots):
            return TokenGroups([(slots[0], None)])  # one adapter for the whole batch: no gather
        ids = torch.tensor(token_slots, dtype=torch.int64)
        groups = [(s, torch.nonzero(ids == s).flatten().to(device)) for s in slots]
        return TokenGroups(groups)

    def apply(
        self, y: torch.Tensor, x: torch.Tensor, weights: LoRAWeights, plan: TokenGroups
    ) -> torch.Tensor:
        for slot, idx in plan.groups:
            if not weights.present[slot]:
                continue
            xs = x if idx is None else x.index_select(0, idx)  # [n, in]
            delta = (xs @ weights.a[slot].t()) @ weights.b[slot].t()  # [n, R] -> [n, out]
            if idx is None:
                y = y + delta
            else:
                y.index_add_(0, idx, delta.to(y.dtype))
        return y
