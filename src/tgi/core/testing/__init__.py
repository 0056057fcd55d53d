"""Test helpers that backends of any framework reuse: the runner-level conformance suite
(`RunnerConformance`, through a real engine), the reference sampler and its cases (`reference_sampler`,
`sampling_cases`), small random-weight checkpoints (`tiny_models`, `model`).

A backend's test module::

    from tgi.core.testing import RunnerConformance

    class TestMyChipRunner(RunnerConformance):
        def make_backend(self):
            return MyChipBackend()

Torch backends subclass `tgi.core.torch.testing.TorchBackendConformance` instead, which adds the
torch-level checks (attention, KV cache, sampler on torch tensors). `pytest` must be installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tgi.core.testing.runner_conformance import RunnerConformance

__all__ = ["RunnerConformance"]


def __getattr__(name: str):
    # lazy: importing tgi.core.testing must not need pytest
    if name == "RunnerConformance":
        from tgi.core.testing.runner_conformance import RunnerConformance

        return RunnerConformance
    raise AttributeError(name)
