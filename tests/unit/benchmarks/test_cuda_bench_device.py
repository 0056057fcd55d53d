"""cuda_bench.py's dry run serves with the package's interpreted CUDA backend, the one the Triton conformance
tests use, not a copy of its own."""

from __future__ import annotations

import os

import pytest

from tgi.benchmarks.cuda_bench_device import Device, dry_backend


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="TRITON_INTERPRET=1 is not set")
def test_the_dry_run_backend_is_the_interpreted_cuda_backend():
    from tgi.backends.cuda.interpreted import InterpretedCudaBackend

    backend = dry_backend()
    assert type(backend) is InterpretedCudaBackend
    assert Device(dry_run=True).name.startswith("host CPU")
    # the dry run's engine: the same backend, its decode never split (the dry contexts are far below a split)
    one_split = dry_backend(one_split=True)
    assert isinstance(one_split, InterpretedCudaBackend) and one_split.attention().max_splits == 1
