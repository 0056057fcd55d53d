"""The CPU reference backend passes the backend conformance suite."""

from __future__ import annotations

from tgi.core.testing import BackendConformance


class TestCpuConformance(BackendConformance):
    def make_backend(self):
        from tgi.backends.cpu.backend import CpuBackend

        return CpuBackend()
