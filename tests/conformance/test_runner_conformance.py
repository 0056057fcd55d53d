"""The runner-level conformance suite, on its own: the CPU backend passes it, and so does a CPU backend
whose runner declares the constraints of a static-shape runner (the scheduler honours them). The CPU
backend and the example plugin also pass it through `TorchBackendConformance` (test_cpu_conformance.py,
test_example_conformance.py)."""

from __future__ import annotations

from tgi.backends.cpu.backend import CpuBackend
from tgi.core.interfaces import RunnerConstraints
from tgi.core.testing import RunnerConformance
from tgi.core.torch.runner import TorchModelRunner


class TestCpuRunner(RunnerConformance):
    backend_name = "cpu"  # through the plugin host, as a third party's backend would be built


class StaticShapeRunner(TorchModelRunner):
    """Core's runner, declaring what a compiled static-shape runner would."""

    def constraints(self) -> RunnerConstraints:
        # prefill steps as rows padded to 1 or 2, within 64 padded tokens (a lone 45-token prompt fits)
        return RunnerConstraints(
            max_batch_size=2, mixed_batches=False, chunked_prefill=False, prefill_batch_buckets=(1, 2),
            max_padded_prefill_tokens=64,
        )  # fmt: skip


class StaticShapeCpuBackend(CpuBackend):
    name = "cpu-static"

    def create_rank_runner(self, source, config, collective):
        return StaticShapeRunner(self, source, config, collective)


class TestStaticShapeRunner(RunnerConformance):
    max_batch_prefill_tokens = 64  # no chunked prefill: the longest prompt fits one step

    def make_backend(self):
        return StaticShapeCpuBackend()
