"""Registers the TPU backend (JAX) with tgi's plugin host, through the same entry point a third party uses.

The probe never falls back: without TPU devices the backend is unavailable, with the reason, unless
`TGI_JAX_PLATFORM=cpu` explicitly asks for JAX's CPU devices (then it says so).
"""

from __future__ import annotations

import os

from tgi.core import __version__
from tgi.core.interfaces import INTERFACE_VERSION, ProbeResult
from tgi.core.plugins import BackendSpec, hookimpl


def _probe() -> ProbeResult:
    import importlib.util

    from tgi.backends.tpu.platform import ENV, PlatformError, devices, requested_platform

    try:
        platform = requested_platform()
    except PlatformError as exc:
        return ProbeResult.unavailable(str(exc))
    if platform == "tpu" and importlib.util.find_spec("libtpu") is None:
        # JAX reaches TPUs only through the libtpu runtime: without it, say so without importing JAX (a
        # second of every start-up on machines that have JAX for its CPU devices only)
        return ProbeResult.unavailable(
            "no TPU runtime: the libtpu package is not installed (`pip install 'jax[tpu]'` on a TPU host; "
            f"set {ENV}=cpu to run this backend on JAX's CPU devices)"
        )
    try:
        import jax
    except ImportError as exc:
        return ProbeResult.unavailable(f"JAX is not installed ({exc}); run `pip install 'tgi[tpu]'`")
    if platform == "cpu":  # JAX is not initialised here, so --num-shard can still set the device count
        return ProbeResult.ok(f"JAX {jax.__version__} on CPU devices ({ENV}=cpu: not a TPU)")
    try:
        found = devices("tpu")
    except PlatformError as exc:
        return ProbeResult.unavailable(f"{exc} (set {ENV}=cpu to run this backend on JAX's CPU devices)")
    return ProbeResult.ok(f"JAX {jax.__version__}: {len(found)} x {found[0].device_kind}")


def _create():
    from tgi.backends.tpu.backend import TpuBackend

    return TpuBackend()


@hookimpl
def tgi_register_backends(register):
    register(
        BackendSpec(
            name="tpu",
            version=__version__,
            interface_version=INTERFACE_VERSION,
            # a TPU host wins over the CPU; without TPU devices the probe fails. JAX on the CPU (asked for by
            # TGI_JAX_PLATFORM=cpu) is never what `--backend auto` picks over the torch CPU backend
            priority=-1 if os.environ.get("TGI_JAX_PLATFORM", "").strip().lower() == "cpu" else 20,
            description="JAX on Google TPUs (or JAX's CPU devices with TGI_JAX_PLATFORM=cpu)",
            probe=_probe,
            create=_create,
        )
    )
