"""`to_device` / `to_host`: a step's data to the device without a wait, and back in one copy."""

from __future__ import annotations

import math

import pytest
import torch

from tgi.core.torch.host_transfer import to_device, to_host


def test_to_device_on_the_cpu_is_the_host_tensor_unpinned(monkeypatch):
    def refuse(self):
        raise AssertionError("pinned memory is for device copies only")

    monkeypatch.setattr(torch.Tensor, "pin_memory", refuse)
    t = to_device([[1, 2], [3, 4]], torch.int32, "cpu")
    assert t.dtype == torch.int32 and t.device.type == "cpu" and t.tolist() == [[1, 2], [3, 4]]
    assert to_device([5], torch.int64, None).tolist() == [5]


def test_to_host_reads_every_tensor_back_in_one_copy(monkeypatch):
    reads = []
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(self.shape) or tolist(self))
    ids = torch.tensor([3, 2**40 + 1, -7], dtype=torch.int64)
    logprobs = torch.tensor([-0.1, float("-inf"), 0.0], dtype=torch.float32)
    top = torch.tensor([[1, 2], [3, 4], [5, 6]], dtype=torch.int64)
    top_lp = torch.tensor([[-1.5, -2.25], [-3.0, float("-inf")], [0.0, -1e-30]], dtype=torch.float32)
    got = to_host(ids, logprobs, top, top_lp)
    assert len(reads) == 1
    assert got == [tolist(ids), tolist(logprobs), tolist(top), tolist(top_lp)]
    assert all(type(v) is int for v in got[0]) and all(type(v) is float for v in got[1])
    assert math.isinf(got[3][1][1])
    assert to_host() == []


@pytest.mark.parametrize("rows", [0, 1, 4])
def test_to_host_keeps_empty_and_nested_shapes(rows):
    t = torch.arange(rows * 3, dtype=torch.int64).view(rows, 3)
    assert to_host(t, torch.zeros(rows)) == [t.tolist(), [0.0] * rows]
