"""The ROCm backend: the shared Triton backend on an AMD GPU (PyTorch's HIP build reuses `torch.cuda`)."""

from __future__ import annotations

from typing import ClassVar

import torch

from tgi.backends.triton_common.backend import TritonBackend
from tgi.core.interfaces import DeviceInfo


class RocmBackend(TritonBackend):
    """Same device API (`torch.cuda` on HIP), same Triton kernels (triton's AMD backend compiles them),
    `nccl` as the process-group name (PyTorch maps it to RCCL on ROCm). What differs is in docs/backends/rocm.md."""

    name: ClassVar[str] = "rocm"
    process_group_backend: ClassVar[str] = "nccl"  # RCCL under that name

    def devices(self) -> list[DeviceInfo]:
        props = torch.cuda.get_device_properties(self.device)
        arch = getattr(props, "gcnArchName", "")
        name = f"{props.name} ({arch})" if arch and arch not in props.name else props.name
        return [DeviceInfo(self.device.index or 0, name, props.total_memory)]
