"""Registers the gaudi backend with tgi's plugin host (entry point `gaudi`)."""

from __future__ import annotations

from tgi.core import __version__
from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.plugins import BackendSpec, hookimpl


def _probe() -> ProbeResult:
    from tgi.backends.gaudi.probe import probe

    return probe()


def _create():
    from tgi.backends.gaudi.backend import GaudiBackend

    return GaudiBackend()


@hookimpl
def tgi_register_backends(register):
    register(
        BackendSpec(
            name="gaudi",
            version=__version__,
            interface_version=INTERFACE_VERSION,
            priority=100,  # a visible Gaudi wins over the CPU
            description="Intel Gaudi HPUs: habana_frameworks (hpu device), fused SDPA, HPU graphs per bucket, hccl",
            probe=_probe,
            create=_create,
        )
    )
