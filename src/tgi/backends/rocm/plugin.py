"""Registers the ROCm backend with tgi's plugin host (entry point `rocm`)."""

from __future__ import annotations

from tgi.core import __version__
from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.plugins import BackendSpec, hookimpl


def _probe() -> ProbeResult:
    try:
        import torch
    except ImportError as exc:
        return ProbeResult.unavailable(f"PyTorch is not installed ({exc})")
    hip = getattr(torch.version, "hip", None)
    if not hip:
        return ProbeResult.unavailable(f"PyTorch was built without ROCm/HIP (torch {torch.__version__})")
    if not torch.cuda.is_available():  # ROCm builds answer through torch.cuda
        return ProbeResult.unavailable(
            f"no ROCm device visible (torch {torch.__version__}, HIP {hip}; check the amdgpu driver, "
            "/dev/kfd permissions and HIP_VISIBLE_DEVICES)"
        )
    try:
        import triton
    except ImportError as exc:
        return ProbeResult.unavailable(f"triton is not installed ({exc}): pip install 'tgi[rocm]'")
    return ProbeResult.ok(
        f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}, HIP {hip}, triton {triton.__version__}"
    )


def _create():
    from tgi.backends.rocm.backend import RocmBackend

    return RocmBackend()


@hookimpl
def tgi_register_backends(register):
    register(
        BackendSpec(
            name="rocm",
            version=__version__,
            interface_version=INTERFACE_VERSION,
            priority=100,  # never competes with cuda: the two probes exclude each other (torch.version.hip)
            description="AMD GPUs: PyTorch (ROCm/HIP) + Triton paged attention, RCCL via nccl",
            probe=_probe,
            create=_create,
        )
    )
