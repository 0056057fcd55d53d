"""The neuron probe says why NeuronCores cannot be used (packages missing, no device, driver too old), each
on a fake host, and what it finds here."""

from __future__ import annotations

from types import SimpleNamespace

from tgi.backends.neuron.probe import DRIVER_VERSION_FILE, probe
from tgi.core.plugins.probing import HostView


def host(missing=(), driver="2.21.37.0", nodes=("/dev/neuron0", "/dev/neuron1")):
    def import_module(name):
        if name in missing:
            raise ImportError(f"No module named '{name}'")
        return SimpleNamespace(__version__="0")

    files = {DRIVER_VERSION_FILE: driver} if driver else {}
    return HostView(import_module=import_module, glob=lambda p: list(nodes), read_text=files.get)


def test_this_machine():
    result = probe()
    assert not result.available
    assert result.reason.startswith("torch_neuronx is not installed")
    assert "https://pip.repos.neuron.amazonaws.com" in result.reason


def test_each_reason():
    assert probe(host(missing=("optimum.neuron",))).reason.startswith("optimum.neuron is not installed")
    none = probe(host(nodes=(), driver=None))
    assert (
        "no Neuron device (no /dev/neuron* node; the neuron driver (aws-neuronx-dkms) is not loaded)"
        in none.reason
    )
    old = probe(host(driver="2.12.18.0"))
    assert not old.available and old.reason.startswith("the Neuron driver 2.12.18.0 is too old")
    ok = probe(host())
    assert ok.available and ok.reason == "2 Neuron device(s), driver 2.21.37.0"
