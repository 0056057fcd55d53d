"""The xpu probe says why Intel GPUs cannot be used (each reason on a fake host), and what runs here."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from tgi.backends.xpu.probe import probe
from tgi.core.plugins.probing import HostView


def host(xpu=None, nodes=(), triton=True):
    fake_torch = SimpleNamespace(__version__="2.13.0+xpu", xpu=xpu)

    def import_module(name):
        if name == "torch":
            return fake_torch
        if name == "triton" and triton:
            return SimpleNamespace(__version__="3.6.0")
        raise ImportError(f"No module named '{name}'")

    return HostView(import_module=import_module, glob=lambda pattern: list(nodes))


def fake_xpu(compiled=True, available=True):
    props = SimpleNamespace(name="Intel(R) Data Center GPU Max 1550", driver_version="1.6.31294")
    return SimpleNamespace(
        _is_compiled=lambda: compiled, is_available=lambda: available, device_count=lambda: 2,
        get_device_properties=lambda i: props,
    )  # fmt: skip


def test_this_machine():
    result = probe()
    assert not result.available
    assert result.reason.startswith(f"PyTorch was built without XPU support (torch {torch.__version__})")


def test_each_reason():
    assert "built without XPU" in probe(host(fake_xpu(compiled=False))).reason
    no_node = probe(host(fake_xpu(available=False)))
    assert "no Intel GPU visible" in no_node.reason and "no /dev/dri/renderD* node" in no_node.reason
    old = probe(host(fake_xpu(available=False), nodes=["/dev/dri/renderD128"]))
    assert "/dev/dri/renderD128 present" in old.reason and "too old for torch 2.13.0+xpu" in old.reason
    assert "pytorch-triton-xpu" in probe(host(fake_xpu(), triton=False)).reason
    ok = probe(host(fake_xpu()))
    assert ok.available and ok.reason.startswith("Intel(R) Data Center GPU Max 1550 x2, driver 1.6.31294")
