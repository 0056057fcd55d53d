"""The OpenMP workers of a thread that loaded a model, freed when the engine's own thread takes over the steps
(`native.release_openmp_threads`, `CpuBackend.release_loading_thread`): left alone, their idle pool makes
libgomp count more threads than CPUs, and each parallel region of the stepping thread then ends in a sleep
and wake-up of every worker."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from tgi.backends.cpu import backend as cpu_backend
from tgi.backends.cpu import native

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _settled(expected: int, timeout: float = 5.0) -> int:
    """The process's thread count once it reaches `expected` (workers exit just after the release)."""
    deadline = time.monotonic() + timeout
    while _threads() != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return _threads()


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a pool needs two threads")
def test_release_frees_the_calling_threads_workers():
    native.load()
    seen = {}

    def loader() -> None:  # as the thread that loads a model: a parallel region makes its pool
        torch.set_num_threads(2)
        before = _threads()
        torch.ones(1 << 22).mul_(2.0).sum()
        seen["with pool"] = _threads() - before
        seen["released"] = native.release_openmp_threads()
        seen["after"] = _settled(before) - before
        torch.ones(1 << 22).mul_(2.0).sum()  # a later region makes the pool again
        seen["again"] = _threads() - before
        native.release_openmp_threads()

    thread = threading.Thread(target=loader)
    thread.start()
    thread.join()
    assert seen["with pool"] == 1, seen  # one worker beside the thread itself
    assert seen["released"] is True
    assert seen["after"] == 0, seen
    assert seen["again"] == 1, seen


def test_the_loading_thread_frees_its_workers(monkeypatch):
    calls = []
    monkeypatch.setattr(native, "release_openmp_threads", lambda: calls.append(1) or True)
    backend = cpu_backend.CpuBackend()
    backend.release_loading_thread()
    assert calls == [1]
