"""`HpuDevice`: everything the gaudi backend asks of Intel Gaudi's software stack, in one object (the seam).

The backend, its attention, KV cache and runner reach `habana_frameworks` only through an `HpuDevice`, so
that on a machine without Gaudi the same code runs with a fake of it (tests/unit/backends/gaudi/test_gaudi_runner.py: a
recording fake that computes on the CPU). `HabanaDevice` is the real one; it imports `habana_frameworks`
lazily, when the backend is created, never at plugin registration.

The stack is Intel Gaudi's PyTorch bridge (habana_frameworks.torch, 1.x), whose API this code follows:
`habana_frameworks.torch.core.mark_step` (lazy mode: run what was queued), `habana_frameworks.torch.hpu`
(device, memory statistics, synchronize), `habana_frameworks.torch.hpu.graphs.wrap_in_hpu_graph` (an HPU
graph per distinct input shape, replayed afterwards), `habana_frameworks.torch.hpex.kernels.FusedSDPA`
(fused scaled-dot-product attention) and `habana_frameworks.torch.distributed.hccl` (registers the `hccl`
process group with `torch.distributed`). None of it has run here: no Gaudi was available.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class HpuDevice(ABC):
    """The Gaudi calls of the backend. Tensors are torch tensors on `torch_device()`."""

    @abstractmethod
    def torch_device(self) -> torch.device:
        """Where weights, KV cache and activations live (`hpu`)."""

    @abstractmethod
    def device_name(self) -> str: ...

    @abstractmethod
    def memory(self) -> tuple[int, int]:
        """(free, total) bytes of device memory now."""

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def mark_step(self) -> None:
        """Lazy mode: compile (first time for a shape) and run the ops queued since the last mark."""

    @abstractmethod
    def wrap_in_hpu_graph(self, module: torch.nn.Module) -> Any:
        """`module` made to record an HPU graph on its first call with each input shape and replay it on
        later calls with that shape; the returned object is called like the module."""

    @abstractmethod
    def fused_sdpa(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """Attention of q [B, H, L, D] over k/v [B, H, S, D] where `mask` [B, 1, L, S] (bool) is true:
        Gaudi's fused SDPA kernel. Returns [B, H, L, D]."""

    @abstractmethod
    def init_collectives(self) -> str:
        """Make the `hccl` process group available to `torch.distributed`; returns its name."""


class HabanaDevice(HpuDevice):
    """`HpuDevice` over `habana_frameworks` (imported here, when the backend is created)."""

    def __init__(self) -> None:
        import habana_frameworks.torch.core as htcore
        import habana_frameworks.torch.hpu as hthpu
        import torch

        self._core, self._hpu = htcore, hthpu
        self._device = torch.device("hpu")

    def torch_device(self) -> torch.device:
        return self._device

    def device_name(self) -> str:
        return str(self._hpu.get_device_name())

    def memory(self) -> tuple[int, int]:
        stats = self._hpu.memory_stats()  # bytes: "Limit" the allocator may use, "InUse" allocated now
        return int(stats["Limit"] - stats["InUse"]), int(stats["Limit"])

    def synchronize(self) -> None:
        self._hpu.synchronize()

    def mark_step(self) -> None:
        self._core.mark_step()

    def wrap_in_hpu_graph(self, module):
        from habana_frameworks.torch.hpu.graphs import wrap_in_hpu_graph

        # the KV cache is updated in place inside the graph: no cached copies of the inputs
        return wrap_in_hpu_graph(module, disable_tensor_cache=True)

    def fused_sdpa(self, q, k, v, mask, scale):
        from habana_frameworks.torch.hpex.kernels import FusedSDPA

        # (query, key, value, attn_mask, dropout_p, is_causal, scale): causality is in the mask
        return FusedSDPA.apply(q, k, v, mask, 0.0, False, scale)

    def init_collectives(self) -> str:
        import habana_frameworks.torch.distributed.hccl  # noqa: F401 - registers "hccl"

        return "hccl"
