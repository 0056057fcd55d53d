"""Where `cuda_bench.py` runs: the GPU (its published bandwidth, CUDA-event timing) or, for a dry run, the CPU
with `CudaBackend` on CPU tensors in Triton's interpreter."""

from __future__ import annotations

import time

#: published peak memory bandwidth (bytes/s) by device-name fragment
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100-SXM4-80GB": 2.039e12, "A100": 1.555e12, "L40S": 864e9}


def bandwidth_of(device_name: str, override_tbs: float | None) -> float | None:
    if override_tbs:
        return override_tbs * 1e12
    return next((bw for key, bw in BANDWIDTH.items() if key in device_name), None)


class Device:
    """Where the benchmark runs: the GPU, or (dry run) the CPU, whose 'device time' is wall time."""

    def __init__(self, dry_run: bool) -> None:
        import torch

        self.dry_run = dry_run
        self.torch = torch
        self.name = "host CPU (dry run: Triton interpreter)" if dry_run else torch.cuda.get_device_name()

    def synchronize(self) -> None:
        if not self.dry_run:
            self.torch.cuda.synchronize()

    def timed(self, fn) -> float:
        """Seconds `fn()` takes on the device: between two CUDA events on a GPU, wall time on the CPU."""
        if self.dry_run:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def dry_backend(one_split: bool = False):
    """The dry run's backend: `tgi.backends.cuda.interpreted.InterpretedCudaBackend`, `CudaBackend` on CPU
    tensors with its kernels run by Triton's interpreter (`TRITON_INTERPRET=1` must be set before triton is
    imported; it refuses to start otherwise).

    `one_split`: its decode attention never splits a context (`triton_common.attention.one_split_backend`):
    the dry run's contexts (a few dozen tokens) are far below a split's minimum, so they decode in one split
    anyway, and the engine's warm-up runs that one variant. The split variants are the Triton conformance
    tests' and kernel_smoke.py's."""
    from tgi.backends.cuda.interpreted import InterpretedCudaBackend
    from tgi.backends.triton_common.attention import one_split_backend

    return (one_split_backend(InterpretedCudaBackend) if one_split else InterpretedCudaBackend)()
