"""Registers the CUDA backend with tgi's plugin host (entry point `cuda`), as a third-party plugin would."""

from __future__ import annotations

from tgi.core import __version__
from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.plugins import BackendSpec, hookimpl


def _probe() -> ProbeResult:
    try:
        import torch
    except ImportError as exc:
        return ProbeResult.unavailable(f"PyTorch is not installed ({exc})")
    if getattr(torch.version, "hip", None):
        return ProbeResult.unavailable(
            f"PyTorch is a ROCm build (torch {torch.__version__}, HIP {torch.version.hip}): use the rocm backend"
        )
    if torch.version.cuda is None:
        return ProbeResult.unavailable(f"PyTorch was built without CUDA (torch {torch.__version__})")
    if not torch.cuda.is_available():
        return ProbeResult.unavailable(
            f"no CUDA device visible (torch {torch.__version__}, CUDA {torch.version.cuda}; "
            "check the driver and CUDA_VISIBLE_DEVICES)"
        )
    try:
        import triton
    except ImportError as exc:
        return ProbeResult.unavailable(f"triton is not installed ({exc}): pip install 'tgi[cuda]'")
    n = torch.cuda.device_count()
    return ProbeResult.ok(
        f"{torch.cuda.get_device_name(0)} x{n}, CUDA {torch.version.cuda}, triton {triton.__version__}"
    )


def _create():
    from tgi.backends.cuda.backend import CudaBackend

    return CudaBackend()


@hookimpl
def tgi_register_backends(register):
    register(
        BackendSpec(
            name="cuda",
            version=__version__,
            interface_version=INTERFACE_VERSION,
            priority=100,  # a visible NVIDIA GPU wins over the CPU
            description="NVIDIA GPUs: PyTorch + Triton paged attention (bfloat16/float16), nccl",
            probe=_probe,
            create=_create,
        )
    )
