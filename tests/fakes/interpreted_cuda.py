"""`CudaBackend` on CPU tensors, its kernels run by triton's interpreter: the backend the Triton conformance
tests serve models with. Import it only once `TRITON_INTERPRET=1` is set (before triton is imported)."""

from __future__ import annotations

import torch

from tgi.backends.cuda.backend import CudaBackend
from tgi.core.interfaces import DeviceInfo, MemoryInfo


class InterpretedCudaBackend(CudaBackend):
    """`CudaBackend` on CPU tensors: attention, KV cache, MoE and LoRA kernels are Triton, interpreted."""

    def __init__(self) -> None:
        super().__init__(device_index=0, attention="triton", cuda_graphs=False)
        self.device = torch.device("cpu")

    def devices(self):
        return [DeviceInfo(0, "host CPU (Triton interpreter)", 0)]

    def memory_info(self):
        return MemoryInfo(total=8 << 30, free=4 << 30)

    def synchronize(self):
        pass

    def default_dtype(self):
        return "float32"
