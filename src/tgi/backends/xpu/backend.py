"""The XPU backend: the shared Triton backend on an Intel GPU, through upstream PyTorch's `torch.xpu`."""

from __future__ import annotations

from typing import ClassVar

from tgi.backends.triton_common.backend import TritonBackend
from tgi.core.interfaces import DeviceInfo


class XpuBackend(TritonBackend):
    """One Intel GPU per rank: `torch.xpu` for device, memory and graphs (it mirrors `torch.cuda`), the
    Triton kernels of `tgi.backends.triton_common` (compiled by Intel's Triton backend, which PyTorch's XPU
    wheels bring as `pytorch-triton-xpu`), and `xccl` collectives through `torch.distributed`.

    Intel Extension for PyTorch (IPEX) is not used: see docs/backends/xpu.md.
    """

    name: ClassVar[str] = "xpu"
    device_type: ClassVar[str] = "xpu"
    graph_class: ClassVar[str] = "XPUGraph"
    process_group_backend: ClassVar[str] = "xccl"  # oneCCL, in torch.distributed since PyTorch 2.8

    def devices(self) -> list[DeviceInfo]:
        props = self.device_module.get_device_properties(self.device)
        driver = getattr(props, "driver_version", "")
        name = f"{props.name} (driver {driver})" if driver else props.name
        return [DeviceInfo(self.device.index or 0, name, props.total_memory)]
