"""`HabanaDevice`, the real seam, against stand-in `habana_frameworks` modules that record the calls
(habana_frameworks is not on PyPI): which Gaudi API each seam method calls, with which arguments."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace

import torch

from tgi.backends.gaudi.device import HabanaDevice


def _stand_ins(monkeypatch) -> list:
    calls = []

    def module(name, **attrs):
        m = ModuleType(name)
        m.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, m)
        return m

    hf = module("habana_frameworks")
    hf.torch = module(
        "habana_frameworks.torch",
        core=module("habana_frameworks.torch.core", mark_step=lambda: calls.append("mark_step")),
        hpu=module(
            "habana_frameworks.torch.hpu",
            get_device_name=lambda: "GAUDI3",
            memory_stats=lambda: {"Limit": 100, "InUse": 30, "MaxInUse": 40},
            synchronize=lambda: calls.append("synchronize"),
        ),
    )
    hf.torch.hpu.graphs = module(
        "habana_frameworks.torch.hpu.graphs",
        wrap_in_hpu_graph=lambda m, **kw: calls.append(("wrap_in_hpu_graph", kw)) or m,
    )
    fused = SimpleNamespace(apply=lambda *args: calls.append(("FusedSDPA.apply", args[3:])) or args[0])
    hf.torch.hpex = module("habana_frameworks.torch.hpex")
    hf.torch.hpex.kernels = module("habana_frameworks.torch.hpex.kernels", FusedSDPA=fused)
    hf.torch.distributed = module("habana_frameworks.torch.distributed")
    # importing it registers the "hccl" process group with torch.distributed
    hf.torch.distributed.hccl = module("habana_frameworks.torch.distributed.hccl")
    return calls


def test_each_seam_method_calls_the_gaudi_api(monkeypatch):
    calls = _stand_ins(monkeypatch)
    device = HabanaDevice()
    assert device.torch_device() == torch.device("hpu") and device.device_name() == "GAUDI3"
    assert device.memory() == (70, 100)  # Limit - InUse, Limit
    device.mark_step()
    device.synchronize()
    module = torch.nn.Identity()
    assert device.wrap_in_hpu_graph(module) is module
    q = torch.zeros(1, 2, 3, 4)
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    device.fused_sdpa(q, q, q, mask, 0.5)
    assert device.init_collectives() == "hccl"
    assert calls == [
        "mark_step",
        "synchronize",
        ("wrap_in_hpu_graph", {"disable_tensor_cache": True}),
        ("FusedSDPA.apply", (mask, 0.0, False, 0.5)),  # mask, dropout, is_causal (in the mask), scale
    ]
