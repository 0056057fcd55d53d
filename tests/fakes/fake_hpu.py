"""A recording fake of the gaudi backend's seam (`tgi.backends.gaudi.device.HpuDevice`): tensors on the
CPU, attention by torch's SDPA, and a log of what the backend asked of Gaudi (graphs recorded per input
shape and replayed, lazy-mode marks, collectives). Used by tests/unit/test_gaudi_*.py."""

from __future__ import annotations

from collections import Counter

import torch

from tgi.backends.gaudi.device import HpuDevice

GiB = 1 << 30


class FakeHpuGraph:
    """What `wrap_in_hpu_graph` returns: records a graph on the first call with each input shape, replays
    it on later calls (here: runs the module on the CPU either way)."""

    def __init__(self, module: torch.nn.Module, log: FakeHpu) -> None:
        self.module, self.log = module, log

    def __call__(self, *args):
        key = tuple(tuple(a.shape) for a in args)
        if key in self.log.graphs:
            self.log.replays[key] += 1
        else:
            self.log.graphs.append(key)
        return self.module(*args)


class FakeHpu(HpuDevice):
    def __init__(self) -> None:
        self.graphs: list[tuple] = []  # input shapes recorded as graphs, in order
        self.replays: Counter = Counter()
        self.marks = 0
        self.sdpa_calls = 0
        self.collectives: list[str] = []

    def torch_device(self) -> torch.device:
        return torch.device("cpu")

    def device_name(self) -> str:
        return "Fake Gaudi (CPU arithmetic)"

    def memory(self) -> tuple[int, int]:
        return 90 * GiB, 96 * GiB

    def synchronize(self) -> None:
        pass

    def mark_step(self) -> None:
        self.marks += 1

    def wrap_in_hpu_graph(self, module):
        return FakeHpuGraph(module, self)

    def fused_sdpa(self, q, k, v, mask, scale):
        self.sdpa_calls += 1
        assert mask.dtype == torch.bool and mask.shape[1] == 1, "the fused SDPA gets a [B, 1, L, S] bool mask"
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)

    def init_collectives(self) -> str:
        self.collectives.append("hccl")
        return "hccl"
