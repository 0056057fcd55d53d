"""Where the Triton kernel tests run: on the GPU when one is visible (`CudaBackend` on its device, the kernels
compiled), else on CPU tensors in Triton's interpreter (`InterpretedCudaBackend`, `TRITON_INTERPRET=1`
set by tests/conftest.py before triton is imported). Import it once the module's own skips have run."""

from __future__ import annotations

import os

import pytest
import torch

#: a GPU is visible: the kernels run on it
ON_GPU = torch.cuda.is_available()
#: where the tests make their tensors
DEVICE = torch.device("cuda") if ON_GPU else torch.device("cpu")
#: the kernels' type: compiled on a GPU, interpreted without
KERNEL_TYPE = "JITFunction" if ON_GPU else "InterpretedFunction"


def skip_unless_triton_runs() -> None:
    """Skip the calling test module where the kernels can run neither on a GPU nor in the interpreter."""
    if not ON_GPU and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip(
            "no GPU, and TRITON_INTERPRET=1 was not set before triton was imported", allow_module_level=True
        )
    pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")


def kernel_test_backend():
    """The backend class the kernel tests serve models with: float32 by default, no CUDA graphs."""
    if not ON_GPU:
        from interpreted_cuda import InterpretedCudaBackend

        return InterpretedCudaBackend
    from tgi.backends.cuda.backend import CudaBackend

    class Float32CudaBackend(CudaBackend):
        """`CudaBackend` on the visible GPU, float32 by default like the interpreted one."""

        def __init__(self) -> None:
            super().__init__(attention="triton", cuda_graphs=False)

        def default_dtype(self) -> str:
            return "float32"

    return Float32CudaBackend


def one_split_test_backend():
    """`kernel_test_backend()` whose decode attention never splits a context
    (`tgi.backends.triton_common.attention.one_split_backend`), for tests whose contexts are far shorter than
    a split's minimum. The variants themselves are tests/conformance/test_triton_kernel_variants.py's,
    split-K decode test_triton_interpret.py's."""
    from tgi.backends.triton_common.attention import one_split_backend

    return one_split_backend(kernel_test_backend())
