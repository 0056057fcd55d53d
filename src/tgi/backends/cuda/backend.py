"""The CUDA backend: core's torch models with Triton paged attention on an NVIDIA GPU."""

from __future__ import annotations

from typing import ClassVar

from tgi.backends.triton_common.backend import TritonBackend


class CudaBackend(TritonBackend):
    """One NVIDIA GPU per rank: Triton attention (`tgi.backends.triton_common`), nccl collectives."""

    name: ClassVar[str] = "cuda"
    process_group_backend: ClassVar[str] = "nccl"
