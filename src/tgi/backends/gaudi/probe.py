"""Whether an Intel Gaudi HPU can run the gaudi backend here, or why not: the Gaudi software stack
(`habana_frameworks`) is missing, no device is there, or the driver is older than the stack. Cheap: nothing
is compiled or allocated."""

from __future__ import annotations

from tgi.core.interfaces import ProbeResult
from tgi.core.plugins.probing import HostView, version_tuple

#: the kernel driver's version, as its loaded module reports it
DRIVER_VERSION_FILE = "/sys/module/habanalabs/version"
#: device nodes of the habanalabs driver (the accel subsystem since Linux 6.3; /dev/hl* before)
DEVICE_NODES = ("/dev/accel/accel*", "/dev/hl[0-9]*")
INSTALL_HINT = (
    "it ships with Intel Gaudi's software stack, not PyPI: run in Intel's Gaudi PyTorch container "
    "(vault.habana.ai/gaudi-docker/...) or install the stack with Intel's habanalabs-installer.sh"
)


def probe(host: HostView | None = None) -> ProbeResult:
    host = host or HostView()
    try:
        torch = host.import_module("torch")
    except ImportError as exc:
        return ProbeResult.unavailable(f"PyTorch is not installed ({exc})")
    try:
        htorch = host.import_module("habana_frameworks.torch")
        hpu = host.import_module("habana_frameworks.torch.hpu")
    except ImportError as exc:
        return ProbeResult.unavailable(f"habana_frameworks is not installed ({exc}); {INSTALL_HINT}")
    stack = getattr(htorch, "__version__", "")
    driver = host.read_text(DRIVER_VERSION_FILE)
    # Intel pairs each software release with the driver of the same release: an older driver is refused
    if driver and stack and version_tuple(driver)[:2] < version_tuple(stack)[:2]:
        return ProbeResult.unavailable(
            f"the Gaudi driver {driver} is older than the software stack {stack} (habana_frameworks, torch "
            f"{torch.__version__}): install the habanalabs driver of release {'.'.join(stack.split('.')[:2])}"
        )
    if not hpu.is_available():
        nodes = [n for pattern in DEVICE_NODES for n in host.glob(pattern)]
        where = f"device node(s) {', '.join(nodes)} present" if nodes else "no /dev/accel/accel* node"
        loaded = f"driver {driver}" if driver else "the habanalabs driver is not loaded"
        return ProbeResult.unavailable(
            f"no Gaudi device visible ({where}, {loaded}, software {stack or '?'}; check HABANA_VISIBLE_DEVICES "
            "and that no other process holds the devices)"
        )
    return ProbeResult.ok(
        f"{hpu.get_device_name()} x{hpu.device_count()}, driver {driver or '?'}, software {stack or '?'}, "
        f"torch {torch.__version__}"
    )
