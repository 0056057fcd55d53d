"""`InterpretedCudaBackend`: `CudaBackend` on CPU tensors, its Triton kernels run by Triton's interpreter.

For checking the CUDA backend's code where no GPU is: the Triton conformance tests serve models with it, and
`cuda_bench.py --dry-run` runs the benchmark through it. It is never registered as an entry point, so
`--backend cuda` and `--backend auto` never choose it; it is made by naming the class. Its figures mean
nothing about a GPU: the interpreter runs each kernel program as numpy code on the host.

Triton reads `TRITON_INTERPRET` when it is first imported (and when a kernel is decorated), so the variable
must be `1` before anything imports triton; the constructor refuses to start otherwise.
"""

from __future__ import annotations

import os

import torch

from tgi.backends.cuda.backend import CudaBackend
from tgi.core.interfaces import DeviceInfo, MemoryInfo

#: the variable that switches Triton to its interpreter (read at triton's import)
ENV_TRITON_INTERPRET = "TRITON_INTERPRET"
#: what the host CPU is said to hold (the KV cache is sized from `free`; the interpreter is slow long before)
INTERPRETED_TOTAL_BYTES = 8 << 30
INTERPRETED_FREE_BYTES = 4 << 30


class InterpretedCudaBackend(CudaBackend):
    """`CudaBackend` on CPU tensors: attention, KV cache, fused, MoE, LoRA and quantized kernels are its Triton
    kernels, interpreted; float32 by default; no CUDA graphs (nothing to capture on the CPU).

    Raises `RuntimeError` naming `TRITON_INTERPRET=1` when the variable is not set: without it the kernels
    would be compiled for a GPU that is not there."""

    def __init__(self) -> None:
        if os.environ.get(ENV_TRITON_INTERPRET) != "1":
            raise RuntimeError(
                f"InterpretedCudaBackend runs the Triton kernels in Triton's interpreter: set "
                f"{ENV_TRITON_INTERPRET}=1 before triton is first imported"
            )
        super().__init__(device_index=0, attention="triton", cuda_graphs=False)
        self.device = torch.device("cpu")

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(0, "host CPU (Triton interpreter)", 0)]

    def memory_info(self) -> MemoryInfo:
        return MemoryInfo(total=INTERPRETED_TOTAL_BYTES, free=INTERPRETED_FREE_BYTES)

    def synchronize(self) -> None:
        pass  # the interpreter runs each launch to its end before returning

    def release_memory(self) -> None:
        pass  # no device allocator holds freed blocks

    def default_dtype(self) -> str:
        return "float32"
