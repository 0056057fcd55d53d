"""Core's torch LoRA ops (`tgi.core.lora.ops.TorchLoRAOps`): the grouped gather/scatter pass and the stacked
masked pass both equal a per-token loop, for a step mixing adapters, tokens without one and padding rows."""

from __future__ import annotations

import pytest
import torch

from tgi.core.lora.ops import LoRAWeights, TorchLoRAOps

CPU = torch.device("cpu")


def _weights(slots: int, rank: int, k: int, n: int, present=None) -> LoRAWeights:
    g = torch.Generator().manual_seed(rank)
    a = torch.randn(slots, rank, k, generator=g, dtype=torch.float64)
    b = torch.randn(slots, n, rank, generator=g, dtype=torch.float64)
    present = present or (True,) * slots
    for i, p in enumerate(present):
        if not p:
            a[i].zero_(), b[i].zero_()
    return LoRAWeights(a, b, tuple(present))


def _per_token(y, x, w, token_slots):
    out = y.clone()
    for t, s in enumerate(token_slots):
        if s >= 0:
            out[t] += w.b[s] @ (w.a[s] @ x[t])
    return out


@pytest.mark.parametrize("present", [None, (True, False, True, True)])
def test_grouped_and_stacked_equal_a_per_token_loop(present):
    w = _weights(4, 3, 40, 24, present)
    token_slots = [3, -1, 0, 0, 2, -1, 1, 3, 0]
    x = torch.randn(len(token_slots) + 2, 40, dtype=torch.float64)  # two padding rows
    y = torch.randn(x.shape[0], 24, dtype=torch.float64)
    want = _per_token(y, x, w, token_slots)
    ops = TorchLoRAOps()
    plan = ops.plan(token_slots, CPU)
    torch.testing.assert_close(ops.apply_grouped(y.clone(), x, w, plan), want)
    torch.testing.assert_close(ops.apply_stacked(y.clone(), x, w, plan), want)
    torch.testing.assert_close(ops.apply(y.clone(), x, w, plan), want)  # 4 x 3 <= 40 / 4: stacked


def test_one_adapter_for_the_batch_and_none():
    w = _weights(2, 4, 16, 8)
    x, y = torch.randn(5, 16, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)
    ops = TorchLoRAOps()
    assert ops.plan([-1, -1], CPU) is None
    plan = ops.plan([1] * 5, CPU)
    assert plan.groups[0][1] is None and plan.slots is None  # no gather, no mask
    torch.testing.assert_close(ops.apply(y.clone(), x, w, plan), _per_token(y, x, w, [1] * 5))
