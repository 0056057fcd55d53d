"""Whether AWS Inferentia2/Trainium NeuronCores can run the neuron backend here, or why not: the Neuron
packages (`torch_neuronx`, `optimum.neuron`) are missing, no device is there, or the driver is too old.
Cheap: nothing is compiled or loaded onto a device."""

from __future__ import annotations

from tgi.core.interfaces import ProbeResult
from tgi.core.plugins.probing import HostView, version_tuple

DRIVER_VERSION_FILE = "/sys/module/neuron/version"
DEVICE_NODES = "/dev/neuron[0-9]*"
#: the oldest aws-neuronx-dkms driver this backend accepts. An assumption (no Neuron host was available to
#: check it against the runtime of current SDKs, which refuses older drivers itself at model load)
MIN_DRIVER = (2, 19)
NEURON_INDEX = "https://pip.repos.neuron.amazonaws.com"
INSTALL_HINT = (
    f"Neuron's packages come from AWS's own index (pip install torch-neuronx neuronx-cc optimum-neuron "
    f"--extra-index-url {NEURON_INDEX}), or run in AWS's Neuron deep learning container / DLAMI"
)


def probe(host: HostView | None = None) -> ProbeResult:
    host = host or HostView()
    for package in ("torch", "torch_neuronx", "optimum.neuron"):
        try:
            host.import_module(package)
        except ImportError as exc:
            if package == "torch":
                return ProbeResult.unavailable(f"PyTorch is not installed ({exc})")
            return ProbeResult.unavailable(f"{package} is not installed ({exc}); {INSTALL_HINT}")
    nodes = host.glob(DEVICE_NODES)
    driver = host.read_text(DRIVER_VERSION_FILE)
    if not nodes:
        loaded = f"driver {driver} loaded" if driver else "the neuron driver (aws-neuronx-dkms) is not loaded"
        return ProbeResult.unavailable(
            f"no Neuron device (no /dev/neuron* node; {loaded}): not an Inferentia2/Trainium instance?"
        )
    if driver and version_tuple(driver) < MIN_DRIVER:
        return ProbeResult.unavailable(
            f"the Neuron driver {driver} is too old (this backend needs aws-neuronx-dkms "
            f">= {'.'.join(map(str, MIN_DRIVER))})"
        )
    return ProbeResult.ok(f"{len(nodes)} Neuron device(s), driver {driver or '?'}")
