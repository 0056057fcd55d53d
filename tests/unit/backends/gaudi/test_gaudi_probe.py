"""The gaudi probe says why Gaudi cannot be used (package missing, no device, driver older than the
software stack), each on a fake host, and what it finds here."""

from __future__ import annotations

import fnmatch
from types import SimpleNamespace

from tgi.backends.gaudi.probe import DRIVER_VERSION_FILE, probe
from tgi.core.plugins.probing import HostView


def host(stack="1.22.0.740", driver="1.22.0-a1b2c3", available=True, nodes=("/dev/accel/accel0",)):
    hpu = SimpleNamespace(
        is_available=lambda: available, device_count=lambda: 8, get_device_name=lambda: "GAUDI2"
    )
    modules = {"torch": SimpleNamespace(__version__="2.6.0"), "habana_frameworks.torch.hpu": hpu}
    if stack is not None:
        modules["habana_frameworks.torch"] = SimpleNamespace(__version__=stack)

    def import_module(name):
        if name not in modules:
            raise ImportError(f"No module named '{name}'")
        return modules[name]

    files = {DRIVER_VERSION_FILE: driver} if driver else {}
    return HostView(import_module=import_module, glob=lambda p: fnmatch.filter(nodes, p), read_text=files.get)


def test_this_machine():
    result = probe()
    assert not result.available
    assert result.reason.startswith(
        "habana_frameworks is not installed (No module named 'habana_frameworks')"
    )
    assert "not PyPI" in result.reason


def test_each_reason():
    old = probe(host(driver="1.20.1-deadbee"))
    assert not old.available
    assert old.reason.startswith(
        "the Gaudi driver 1.20.1-deadbee is older than the software stack 1.22.0.740"
    )
    none = probe(host(available=False, driver=None, nodes=()))
    assert (
        "no Gaudi device visible (no /dev/accel/accel* node, the habanalabs driver is not loaded"
        in none.reason
    )
    busy = probe(host(available=False))
    assert "device node(s) /dev/accel/accel0 present, driver 1.22.0-a1b2c3" in busy.reason
    ok = probe(host())
    assert ok.available and ok.reason.startswith("GAUDI2 x8, driver 1.22.0-a1b2c3, software 1.22.0.740")
