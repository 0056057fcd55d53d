"""`InterpretedCudaBackend`: `CudaBackend` on CPU tensors, its Triton kernels interpreted; refused without
`TRITON_INTERPRET=1`; no entry point names it."""

from __future__ import annotations

import importlib
import os
import pathlib

import pytest
import tomllib
import torch

from tgi.core.interfaces import KVCacheSpec

ROOT = pathlib.Path(__file__).resolve().parents[4]
interpreting = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="TRITON_INTERPRET=1 is not set (a GPU is visible)"
)


@interpreting
def test_the_cuda_backend_on_the_cpu_writes_its_kv_cache_with_the_interpreted_kernel():
    pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")
    from tgi.backends.cuda.backend import CudaBackend
    from tgi.backends.cuda.interpreted import InterpretedCudaBackend

    write = importlib.import_module("tgi.backends.triton_common.kernels.reshape_and_cache")

    backend = InterpretedCudaBackend()
    assert isinstance(backend, CudaBackend) and backend.name == "cuda"
    assert backend.torch_device() == torch.device("cpu") and backend.default_dtype() == "float32"
    assert backend.cuda_graphs is False and backend.attention_name == "triton"
    assert backend.devices()[0].name == "host CPU (Triton interpreter)"
    assert type(write._reshape_and_cache_kernel).__name__ == "InterpretedFunction"
    cache = backend.create_kv_cache(KVCacheSpec(1, 2, 16, 4, "float32"), 3)
    keys, values = torch.randn(5, 2, 16), torch.randn(5, 2, 16)
    slots = torch.tensor([7, -1, 0, 11, 4])  # a negative slot stores nothing
    cache.write(0, keys, values, slots)
    k, v = (t.reshape(12, 2, 16) for t in cache.layer(0))
    keep = slots >= 0
    assert torch.equal(k[slots[keep]], keys[keep]) and torch.equal(v[slots[keep]], values[keep])
    backend.synchronize()
    backend.release_memory()


def test_refused_without_the_interpreter(monkeypatch):
    from tgi.backends.cuda.interpreted import InterpretedCudaBackend

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        InterpretedCudaBackend()


def test_no_entry_point_registers_it():
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    registered = [module for group in entry_points.values() for module in group.values()]
    assert not any("interpreted" in module for module in registered)
    plugin = (ROOT / "src" / "tgi" / "backends" / "cuda" / "plugin.py").read_text()
    assert "interpreted" not in plugin.lower()
