"""Registers the CPU backend with tgi's plugin host, through the same entry point a third party uses."""

from __future__ import annotations

from tgi.core import __version__
from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.plugins import BackendSpec, hookimpl


def _probe() -> ProbeResult:
    from tgi.backends.cpu.cpuinfo import cpu_info

    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return ProbeResult.unavailable(f"PyTorch is not installed ({exc}); run `pip install torch`")
    return ProbeResult.ok(cpu_info().describe())


def _create():
    from tgi.backends.cpu.backend import CpuBackend

    return CpuBackend()


@hookimpl
def tgi_register_backends(register):
    register(
        BackendSpec(
            name="cpu",
            version=__version__,
            interface_version=INTERFACE_VERSION,
            priority=0,  # any accelerator that is available wins over the CPU
            description="PyTorch on the host CPU (reference backend; bfloat16 via AMX where present)",
            probe=_probe,
            create=_create,
        )
    )
