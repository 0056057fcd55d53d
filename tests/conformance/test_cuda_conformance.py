"""The CUDA and ROCm backends pass the conformance suite on a real GPU (skipped where none is visible)."""

from __future__ import annotations

import pytest
import torch

from tgi.core.torch.testing import TorchBackendConformance

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA/ROCm device visible")


@requires_gpu
@pytest.mark.skipif(bool(getattr(torch.version, "hip", None)), reason="ROCm build: see the rocm class")
class TestCudaConformance(TorchBackendConformance):
    def make_backend(self):
        from tgi.backends.cuda.backend import CudaBackend

        return CudaBackend()


@requires_gpu
@pytest.mark.skipif(not getattr(torch.version, "hip", None), reason="not a ROCm build of PyTorch")
class TestRocmConformance(TorchBackendConformance):
    def make_backend(self):
        from tgi.backends.rocm.backend import RocmBackend

        return RocmBackend()
