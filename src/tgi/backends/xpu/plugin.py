"""Registers the XPU backend with tgi's plugin host (entry point `xpu`)."""

from __future__ import annotations

from tgi.core import __version__
from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.plugins import BackendSpec, hookimpl


def _probe() -> ProbeResult:
    from tgi.backends.xpu.probe import probe

    return probe()


def _create():
    from tgi.backends.xpu.backend import XpuBackend

    return XpuBackend()


@hookimpl
def tgi_register_backends(register):
    register(
        BackendSpec(
            name="xpu",
            version=__version__,
            interface_version=INTERFACE_VERSION,
            priority=100,  # a visible Intel GPU wins over the CPU
            description="Intel GPUs: upstream torch.xpu + Triton paged attention (shared with cuda/rocm), xccl",
            probe=_probe,
            create=_create,
        )
    )
