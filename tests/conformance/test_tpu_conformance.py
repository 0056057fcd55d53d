"""The TPU backend (JAX, on JAX's CPU devices: no TPU here) passes the runner-level conformance suite: greedy
tokens equal transformers', preemption, cancellation, grammar masks and its static-shape constraints."""

from __future__ import annotations

import tempfile
from pathlib import Path

from tgi.core.testing import RunnerConformance

#: shared by the TPU backend's tests (compiled executables are reused between runs)
CACHE = Path(tempfile.gettempdir()) / "tgi-tests-jax-cache"


class TestTpuOnJaxCpuConformance(RunnerConformance):
    def make_backend(self):
        from tgi.backends.tpu.backend import TpuBackend

        return TpuBackend(platform="cpu", cache_dir=str(CACHE))
