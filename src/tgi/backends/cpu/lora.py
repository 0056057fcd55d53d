"""LoRA on the CPU backend (`tgi.core.lora.ops.LoRAOps`): decode-sized steps through the native segmented
pair (`native.lora_sgmv`: one call per adapted linear, each token its own adapter), larger steps through
core's torch ops (grouped or stacked GEMMs, which pay there).

A decode step of a small model is bound by per-op overhead: on 2 AMD EPYC cores (bfloat16, the default
model's shapes, rank 16, 8 tokens of 4 adapters) core's torch ops add 45-60 us per linear, the native call
4-16 us; at 128-1024 tokens it is as fast or faster (per-token work, parallel over tokens). Which path a step takes is decided per step from its token count (`TGI_CPU_LORA_NATIVE_TOKENS`,
default `NATIVE_MAX_TOKENS`; 0 turns the native path off) and the model's dtype (bfloat16 where the CPU has
AVX512-BF16, float32 where it has AVX2+FMA); `describe` says which, for `tgi backends` and `/info`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tgi.core.lora.ops import LoRAWeights, TokenGroups, TorchLoRAOps

#: steps of at most this many tokens take the native pair: measured, it is as fast as core's torch ops or
#: faster at every size up to 1024 tokens (prefill chunks of 4 adapters), so only larger steps leave it
NATIVE_MAX_TOKENS = 2048
#: the native path's implementation for each dtype
_IMPL_FOR = {torch.bfloat16: "avx512-bf16", torch.float32: "avx2"}


def native_max_tokens() -> int:
    return int(os.environ.get("TGI_CPU_LORA_NATIVE_TOKENS", str(NATIVE_MAX_TOKENS)))


@dataclass
class CpuLoRAPlan:
    """A step's plan: each token's slot for the native pair, and core's plan for the torch path."""

    slots: torch.Tensor  # [T] int32, -1: no adapter
    groups: TokenGroups  # core's torch plan, for steps the native pair does not take


def _transposed(w: LoRAWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """(bt [S, R, out], cols [S, R, 2] int32): B transposed, and for each rank the columns [lo, hi) outside
    which its row of bt is zero (a fused linear's part; empty for zero-padded ranks)."""
    bt = w.b.transpose(1, 2).contiguous()
    nonzero = bt != 0  # [S, R, out]
    out = bt.shape[2]
    idx = torch.arange(out)
    lo = torch.where(nonzero, idx, out).amin(dim=2)
    hi = torch.where(nonzero, idx + 1, 0).amax(dim=2)
    lo = torch.minimum(lo, hi)  # an all-zero row: [hi, hi) = [0, 0)
    return bt, torch.stack([lo, hi], dim=2).to(torch.int32).contiguous()


class CpuLoRAOps(TorchLoRAOps):
    """Core's torch ops, with the native pair for steps of at most `max_tokens` tokens in a dtype it serves."""

    def __init__(self, max_tokens: int | None = None) -> None:
        from tgi.backends.cpu import native

        self.max_tokens = native_max_tokens() if max_tokens is None else max_tokens
        self.unavailable = (
            None if self.max_tokens <= 0 or native.available() else "the native kernels do not build"
        )
        impls = native.lora_impls() if self.max_tokens > 0 and self.unavailable is None else []
        self.dtypes = frozenset(dt for dt, impl in _IMPL_FOR.items() if impl in impls)
        self._native = native

    def describe(self, dtype: torch.dtype) -> str:
        """Which path steps take for a model in `dtype`."""
        if dtype in self.dtypes:
            return f"native {_IMPL_FOR[dtype]} for steps of at most {self.max_tokens} tokens, torch ops above"
        if self.max_tokens <= 0:
            why = "TGI_CPU_LORA_NATIVE_TOKENS=0"
        else:
            why = self.unavailable or f"no native path for {dtype} on this CPU"
        return f"torch ops ({why})"

    def plan(self, token_slots: Sequence[int], device: torch.device) -> CpuLoRAPlan | None:
        groups = super().plan(token_slots, device)
        if groups is None:
            return None
        return CpuLoRAPlan(torch.tensor(token_slots, dtype=torch.int32), groups)

    def apply(
        self, y: torch.Tensor, x: torch.Tensor, weights: LoRAWeights, plan: CpuLoRAPlan
    ) -> torch.Tensor:
        native = (
            plan.slots.shape[0] <= self.max_tokens
            and x.dtype in self.dtypes
            and y.dtype == x.dtype
            and x.dim() == 2
            and y.dim() == 2
            and x.stride(1) == 1
            and y.stride(1) == 1
        )
        if not native:
            return super().apply(y, x, weights, plan.groups)
        bt, cols = weights.layout("cpu-bt", _transposed)
        return self._native.lora_sgmv(y, x, weights.a, bt, cols, plan.slots)
