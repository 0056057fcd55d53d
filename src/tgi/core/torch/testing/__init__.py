"""The torch-level conformance cases, for backends derived from `tgi.core.torch.TorchBackend`: attention
against float64, KV writes, the sampler against the reference sampler. A backend's test module::

    from tgi.core.torch.testing import TorchBackendConformance

    class TestMyChipConformance(TorchBackendConformance):
        def make_backend(self):
            return MyChipBackend()

(`pytest` must be installed; see `conformance.py` for what is checked and the knobs.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tgi.core.torch.testing.conformance import TorchBackendConformance

__all__ = ["TorchBackendConformance"]


def __getattr__(name: str):
    # lazy: importing the package must not need pytest
    if name == "TorchBackendConformance":
        from tgi.core.torch.testing.conformance import TorchBackendConformance

        return TorchBackendConformance
    raise AttributeError(name)
