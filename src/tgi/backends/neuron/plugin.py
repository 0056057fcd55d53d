"""Registers the neuron backend with tgi's plugin host (entry point `neuron`)."""

from __future__ import annotations

from tgi.core import __version__
from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.plugins import BackendSpec, hookimpl


def _probe() -> ProbeResult:
    from tgi.backends.neuron.probe import probe

    return probe()


def _create():
    from tgi.backends.neuron.backend import NeuronBackend

    return NeuronBackend()


@hookimpl
def tgi_register_backends(register):
    register(
        BackendSpec(
            name="neuron",
            version=__version__,
            interface_version=INTERFACE_VERSION,
            priority=100,  # visible NeuronCores win over the CPU
            description="AWS Inferentia2/Trainium: models compiled by optimum-neuron, static batch of slots",
            probe=_probe,
            create=_create,
        )
    )
