"""Mixture of experts: a router picks `top_k` experts per token; each expert is a gated MLP.

`GroupedExperts` computes the expert products grouped per expert: the (token, expert) pairs are sorted by
expert, so that each expert multiplies all its tokens at once (one matmul pair per expert that has
tokens), and the weighted results are added back per token. `per_token_moe` is the plain per-token loop,
kept as the reference the grouping is tested and benchmarked against. A backend may attach a fused kernel
(`GroupedExperts.experts_kernel`, e.g. Triton's fused MoE) that computes the same thing.

Tensor parallelism splits every expert's intermediate dim over the ranks (gate/up by rows, down by
columns) and all-reduces the combined output, as a row-parallel linear does; the router is replicated.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from tgi.core.models.layers import Linear, LinearFactory, activation


def route(router_logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """router_logits [T, E] -> (weights [T, k] float32, expert ids [T, k] int64): softmax in float32, the
    top k, renormalised to sum to 1 where `renormalize` (Mixtral; Qwen's `norm_topk_prob`)."""
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


class GroupedExperts(nn.Module):
    """`num_experts` gated MLPs stored as `w13` [E, 2 * I_r, H] (gate rows, then up rows) and `w2`
    [E, H, I_r], I_r = I / tp_size. Checkpoint parts: `w13` takes (expert, "gate") and (expert, "up"),
    `w2` takes the expert index."""

    #: callable(x [T, H], w13, w2, weights [T, k] float32, ids [T, k]) -> [T, H] (before the all-reduce),
    #: computing what `grouped_moe` computes (SiLU experts only), set by a backend
    experts_kernel = None

    def __init__(
        self,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        hidden_act: str,
        linear: LinearFactory,
        dtype: torch.dtype,
        device: object,
    ) -> None:
        super().__init__()
        tp, rank = linear.tp_size, linear.tp_rank
        if intermediate_size % tp:
            raise ValueError(f"expert intermediate size {intermediate_size} is not divisible by {tp} shards")
        self.inter = intermediate_size // tp
        self._start = rank * self.inter  # this rank's first row of each expert's intermediate dim
        self.collective = getattr(linear, "collective", None) if tp > 1 else None
        self.w13 = nn.Parameter(
            torch.empty(num_experts, 2 * self.inter, hidden_size, dtype=dtype, device=device)
        )
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden_size, self.inter, dtype=dtype, device=device))
        self.param_shard_ids = {
            "w13": [(e, part) for e in range(num_experts) for part in ("gate", "up")],
            "w2": list(range(num_experts)),
        }
        self.hidden_act = hidden_act
        self.act = activation(hidden_act)

    def weight_slice(self, param_name: str, shard_id: object = None) -> tuple[slice, ...]:
        rows = slice(self._start, self._start + self.inter)
        return (rows,) if param_name == "w13" else (slice(None), rows)

    def weight_loader(self, param: torch.Tensor, tensor: torch.Tensor, shard_id: object = None) -> None:
        if param is self.w13:
            expert, part = shard_id
            if tensor.shape[0] != self.inter:
                tensor = tensor.narrow(0, self._start, self.inter)
            dst = param.data[expert].narrow(0, 0 if part == "gate" else self.inter, self.inter)
        else:
            expert = shard_id
            if tensor.shape[1] != self.inter:
                tensor = tensor.narrow(1, self._start, self.inter)
            dst = param.data[expert]
        if tuple(dst.shape) != tuple(tensor.shape):
            raise ValueError(f"expert weight of shape {tuple(tensor.shape)} does not fit {tuple(dst.shape)}")
        dst.copy_(tensor)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """x [T, H], weights [T, k] float32, ids [T, k] -> [T, H]."""
        if self.experts_kernel is not None:
            y = self.experts_kernel(x, self.w13, self.w2, weights, ids)
        else:
            y = grouped_moe(x, self.w13, self.w2, weights, ids, self.act)
        return y if self.collective is None else self.collective.all_reduce(y)


def grouped_moe(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, act: Any
) -> torch.Tensor:
    """The experts' weighted sum for every token, one matmul pair per expert over all its tokens."""
    k = ids.shape[1]
    inter = w2.shape[2]
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)  # (token, slot) pairs grouped by expert
    counts = torch.bincount(flat, minlength=w13.shape[0]).tolist()
    token_of = order // k
    xs = x.index_select(0, token_of)  # [T * k, H], expert by expert
    out = torch.empty_like(xs)
    start = 0
    for expert, n in enumerate(counts):
        if n:
            gate_up = xs[start : start + n] @ w13[expert].T  # [n, 2 I]
            h = act(gate_up[:, :inter]) * gate_up[:, inter:]
            out[start : start + n] = h @ w2[expert].T
            start += n
    weighted = (out * weights.reshape(-1)[order, None]).to(x.dtype)  # as transformers: in float32, then cast
    return torch.zeros_like(x).index_add_(0, token_of, weighted)


def per_token_moe(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, act: Any
) -> torch.Tensor:
    """Reference: a Python loop over tokens and their experts (what the grouping must equal)."""
    inter = w2.shape[2]
    out = torch.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[i, j])
            gate_up = x[i] @ w13[e].T
            y = (act(gate_up[:inter]) * gate_up[inter:]) @ w2[e].T
            out[i] += (y * weights[i, j]).to(x.dtype)
    return out


class SparseMoE(nn.Module):
    """Router (`gate`, replicated) + `experts`; optionally a shared expert that every token also runs,
    scaled by sigmoid(`shared_expert_gate`(x)) (Qwen2-MoE)."""

    def __init__(
        self,
        hidden_size: int,
        num_experts: int,
        top_k: int,
        intermediate_size: int,
        hidden_act: str,
        renormalize: bool,
        linear: LinearFactory,
        dtype: torch.dtype,
        device: object,
        shared_expert: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.top_k, self.renormalize = top_k, renormalize
        self.gate = Linear(hidden_size, num_experts, bias=False, dtype=dtype, device=device)
        self.experts = GroupedExperts(
            num_experts, hidden_size, intermediate_size, hidden_act, linear, dtype, device
        )
        if shared_expert is not None:
            self.shared_expert = shared_expert
            self.shared_expert_gate = Linear(hidden_size, 1, bias=False, dtype=dtype, device=device)
        self.has_shared = shared_expert is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = route(self.gate(x), self.top_k, self.renormalize)
        y = self.experts(x, weights, ids)
        if self.has_shared:
            y = y + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return y


def expert_target(name: str, part_names: dict[str, str]) -> tuple[str, object] | None:
    """Map a per-expert checkpoint tensor `<prefix>.experts.<e>.<part>.weight` onto `GroupedExperts`:
    `part_names` maps the checkpoint's part names to "gate", "up" or "down" (Mixtral: w1, w3, w2;
    Qwen: gate_proj, up_proj, down_proj). None for other names."""
    m = _EXPERT.match(name)
    if m is None or m.group(3) not in part_names:
        return None
    prefix, expert, part = m.group(1), int(m.group(2)), part_names[m.group(3)]
    if part == "down":
        return f"{prefix}.experts.w2", expert
    return f"{prefix}.experts.w13", (expert, part)


_EXPERT = re.compile(r"^(.*)\.experts\.(\d+)\.(\w+)\.weight$")
