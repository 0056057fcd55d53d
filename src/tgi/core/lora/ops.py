"""The seam a backend fills for LoRA: the low-rank products of a whole batch, grouped by adapter.

Each adapted linear holds its adapters' weights stacked (`LoRAWeights`): slot `i` is adapter `i`, ranks
zero-padded to the largest, parts of a fused linear (q/k/v, gate/up) side by side along the rank axis with
`b` block-structured so that each part lands in its own output rows. Once per step the runner maps every
token of the batch to a slot (-1: no adapter) and `LoRAOps.plan` turns that into whatever the kernel needs;
then every adapted linear calls `LoRAOps.apply(y, x, weights, plan)` with its base output `y`:

    y[t] += (x[t] @ a[slot(t)].T) @ b[slot(t)].T      for every token t with slot(t) >= 0

`TorchLoRAOps` is the reference: one gather, two matmuls and one scatter per adapter present in the batch
(a segmented gather/scatter, the shape of Punica's SGMV), none for tokens without an adapter. When several
adapters share a step of few tokens (`STACKED_MAX_TOKENS`) or their stacked ranks are small against the
layer's input (`STACKED_FRACTION`), it computes all of them in one pass instead:
`((x @ A_all.T) * mask) @ B_all`, where A_all/B_all hold every slot's ranks side by side and the per-token
mask keeps only the token's own slot: three ops per linear whatever the mix (a decode step is bound by
per-op overhead on a CPU: 45-80 us against 210-245 us per linear for 4 adapters at 8 tokens in bfloat16 on
2 EPYC cores). A backend with a fused kernel subclasses `LoRAOps` and returns it from
`TorchBackend.lora_ops()`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

#: the stacked pass is used when num_slots * R <= STACKED_FRACTION * in_features, or for steps of at most
#: STACKED_MAX_TOKENS tokens (decodes: bound by per-op overhead, not arithmetic); see the module docstring
STACKED_FRACTION = 0.25
STACKED_MAX_TOKENS = 64


@dataclass
class LoRAWeights:
    """One linear's adapters, stacked."""

    a: torch.Tensor  # [num_slots, R, in_features]
    b: torch.Tensor  # [num_slots, out_features, R], scaling applied
    present: tuple[bool, ...]  # present[i]: adapter i adapts this linear (else its slot is all zeros)
    _b_stacked: torch.Tensor | None = field(default=None, repr=False)  # [num_slots * R, out], on first use
    _layouts: dict = field(default_factory=dict, repr=False)  # a backend's own layouts (`layout`)

    def layout(self, name: str, make: Callable[[LoRAWeights], object]) -> object:
        """A backend's own layout of these weights (B transposed, ...), made by `make(self)` on first use and
        kept with them: the weights of a linear are made anew whenever its adapters change."""
        if name not in self._layouts:
            self._layouts[name] = make(self)
        return self._layouts[name]

    def b_stacked(self) -> torch.Tensor:
        """b as [num_slots * R, out_features] (row i * R + j: slot i's rank j), made once."""
        if self._b_stacked is None:
            slots, out, rank = self.b.shape
            self._b_stacked = self.b.permute(0, 2, 1).reshape(slots * rank, out).contiguous()
        return self._b_stacked


@dataclass
class TokenGroups:
    """The reference plan: for each adapter in the step, the indices of its tokens."""

    groups: list[tuple[int, torch.Tensor | None]]  # (slot, token indices [n] int64; None: every token)
    slots: torch.Tensor | None = None  # [T] int64: each token's slot (-1: none), when several groups
    masks: dict = field(default_factory=dict)  # (num_slots, R, dtype) -> [T, num_slots * R] 0/1, made once

    def mask(self, num_slots: int, rank: int, dtype: torch.dtype) -> torch.Tensor:
        """[T, num_slots * R]: 1 where column i * R + j belongs to the token's own slot i."""
        key = (num_slots, rank, dtype)
        if key not in self.masks:
            cols = torch.arange(num_slots, device=self.slots.device).repeat_interleave(rank)
            self.masks[key] = (self.slots[:, None] == cols[None, :]).to(dtype)
        return self.masks[key]


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
    """The reference: per adapter present, gather its tokens, shrink (x A^T), expand (. B^T), scatter-add;
    or, for several adapters of small stacked rank, one masked pass over all (see the module docstring)."""

    def plan(self, token_slots: Sequence[int], device: torch.device) -> TokenGroups | None:
        slots = sorted({s for s in token_slots if s >= 0})
        if not slots:
            return None
        if len(slots) == 1 and all(s == slots[0] for s in token_slots):
            return TokenGroups([(slots[0], None)])  # one adapter for the whole batch: no gather
        ids = torch.tensor(token_slots, dtype=torch.int64)
        groups = [(s, torch.nonzero(ids == s).flatten().to(device)) for s in slots]
        return TokenGroups(groups, ids.to(device))

    def apply(
        self, y: torch.Tensor, x: torch.Tensor, weights: LoRAWeights, plan: TokenGroups
    ) -> torch.Tensor:
        num_slots, rank, in_features = weights.a.shape
        small = plan.slots is not None and plan.slots.shape[0] <= STACKED_MAX_TOKENS
        if plan.slots is not None and (small or num_slots * rank <= STACKED_FRACTION * in_features):
            return self.apply_stacked(y, x, weights, plan)
        return self.apply_grouped(y, x, weights, plan)

    @staticmethod
    def apply_stacked(
        y: torch.Tensor, x: torch.Tensor, weights: LoRAWeights, plan: TokenGroups
    ) -> torch.Tensor:
        """Every slot's ranks in one pass, masked per token (see the module docstring)."""
        num_slots, rank, in_features = weights.a.shape
        t = plan.slots.shape[0]  # rows of x past the step's tokens (padding) are left alone
        shrunk = x[:t] @ weights.a.view(num_slots * rank, in_features).t()  # [T, S * R]
        shrunk = shrunk * plan.mask(num_slots, rank, shrunk.dtype)
        y[:t].addmm_(shrunk, weights.b_stacked())  # [T, S * R] @ [S * R, out]
        return y

    @staticmethod
    def apply_grouped(
        y: torch.Tensor, x: torch.Tensor, weights: LoRAWeights, plan: TokenGroups
    ) -> torch.Tensor:
        """Per adapter in the step: gather its tokens, shrink, expand, scatter-add."""
        for slot, idx in plan.groups:
            if not weights.present[slot]:
                continue
            if idx is None:  # every token: expand straight into y (two ops)
                y.addmm_(x[: y.shape[0]] @ weights.a[slot].t(), weights.b[slot].t())
                continue
            xs = x.index_select(0, idx)  # [n, in]
            delta = (xs @ weights.a[slot].t()) @ weights.b[slot].t()  # [n, R] -> [n, out]
            y.index_add_(0, idx, delta.to(y.dtype))
        return y
