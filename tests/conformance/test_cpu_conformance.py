"""The CPU reference backend passes the backend conformance suite."""

from __future__ import annotations

from tgi.core.torch.testing import TorchBackendConformance


class TestCpuConformance(TorchBackendConformance):
    def make_backend(self):
        from tgi.backends.cpu.backend import CpuBackend

        return CpuBackend()


class TestCpuSdpaConformance(TorchBackendConformance):
    """The pure-torch reference attention ("cpu-sdpa"; the default is "cpu-native") passes it too."""

    def make_backend(self):
        from tgi.backends.cpu.backend import CpuBackend

        backend = CpuBackend()
        backend.select_attention("cpu-sdpa")
        return backend
