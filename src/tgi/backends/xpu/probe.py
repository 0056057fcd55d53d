"""Whether an Intel GPU can run the xpu backend here, or why not (PyTorch without XPU, no device, a driver
too old for this PyTorch, no Triton for XPU). Cheap: no kernel is compiled, no memory allocated."""

from __future__ import annotations

from tgi.core.interfaces import ProbeResult
from tgi.core.plugins.probing import HostView

XPU_WHEELS = "https://download.pytorch.org/whl/xpu"


def probe(host: HostView | None = None) -> ProbeResult:
    host = host or HostView()
    try:
        torch = host.import_module("torch")
    except ImportError as exc:
        return ProbeResult.unavailable(f"PyTorch is not installed ({exc})")
    xpu = getattr(torch, "xpu", None)
    if xpu is None or not xpu._is_compiled():
        return ProbeResult.unavailable(
            f"PyTorch was built without XPU support (torch {torch.__version__}); install its XPU build "
            f"(pip install torch --index-url {XPU_WHEELS})"
        )
    if not xpu.is_available():
        nodes = host.glob("/dev/dri/renderD*")
        if nodes:  # a GPU is there but the runtime under torch cannot open it
            return ProbeResult.unavailable(
                f"GPU render node(s) {', '.join(nodes)} present, but torch.xpu finds no device: the Intel "
                f"GPU driver or Level Zero runtime is missing or too old for torch {torch.__version__} "
                "(or this user lacks the render group)"
            )
        return ProbeResult.unavailable(
            f"no Intel GPU visible (torch {torch.__version__}; no /dev/dri/renderD* node: check the "
            "Intel GPU driver and ZE_AFFINITY_MASK)"
        )
    try:
        triton = host.import_module("triton")
    except ImportError as exc:
        return ProbeResult.unavailable(
            f"triton does not import ({exc}): PyTorch's XPU wheels bring it as pytorch-triton-xpu ({XPU_WHEELS})"
        )
    props = xpu.get_device_properties(0)
    driver = getattr(props, "driver_version", "?")
    return ProbeResult.ok(
        f"{props.name} x{xpu.device_count()}, driver {driver}, torch {torch.__version__}, "
        f"triton {triton.__version__}"
    )
