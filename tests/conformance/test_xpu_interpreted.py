"""The xpu backend on this CPU-only machine: `XpuBackend` with its device module (`torch.xpu`, the seam)
replaced by a fake that records every call and answers like an idle Intel GPU, its tensors on the CPU and
the Triton kernels it shares with cuda/rocm (`tgi.backends.triton_common`) run by triton's interpreter.

What runs here is XpuBackend's own code (device-module calls, memory sizing, the activation profile, the
xccl process group) and one engine generation through that seam (its greedy tokens equal the CPU backend's).
What cannot run is Intel's Triton compiler and the GPU.

The backend conformance suite (attention, KV cache, quantized KV and linears, sampler, and every
runner-level check through a real engine) is not run again here: `XpuBackend` and `CudaBackend` are the same
`TritonBackend` (the same runner, attention, KV cache, sampler, kernels and capability answers:
`test_xpu_answers_as_cuda` checks it) and differ only in the device seam this file checks, so
test_triton_interpret.py, which runs the whole suite on `CudaBackend` with the same kernels interpreted,
covers the same code path.
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip(
        "a GPU is visible: the kernels run natively in test_cuda_conformance.py", allow_module_level=True
    )
if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
    raise RuntimeError("triton was imported before TRITON_INTERPRET=1 was set (see tests/conftest.py)")
os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

from tgi.backends.xpu.backend import XpuBackend
from tgi.core.interfaces import DeviceInfo
from tgi.core.testing.model import PROMPTS, generate_greedy

GiB = 1 << 30


class FakeXpuModule:
    """Stands in for `torch.xpu`: answers as one idle Intel GPU of 16 GiB and records each call by name."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.allocated = 0

    def _record(self, name: str) -> None:
        self.calls.append(name)

    def is_available(self) -> bool:
        self._record("is_available")
        return True

    def current_device(self) -> int:
        self._record("current_device")
        return 0

    def get_device_properties(self, device=None):
        self._record("get_device_properties")
        return SimpleNamespace(
            name="Fake Intel Data Center GPU", total_memory=16 * GiB, driver_version="1.6.0"
        )

    def mem_get_info(self, device=None):
        self._record("mem_get_info")
        return 12 * GiB, 16 * GiB

    def memory_reserved(self, device=None) -> int:
        self._record("memory_reserved")
        return self.allocated + GiB  # 1 GiB cached by the allocator, unused

    def memory_allocated(self, device=None) -> int:
        self._record("memory_allocated")
        return self.allocated

    def max_memory_allocated(self, device=None) -> int:
        self._record("max_memory_allocated")
        return self.allocated + 256 * 2**20  # a 256 MiB activation peak

    def reset_peak_memory_stats(self, device=None) -> None:
        self._record("reset_peak_memory_stats")

    def empty_cache(self) -> None:
        self._record("empty_cache")

    def synchronize(self, device=None) -> None:
        self._record("synchronize")

    def is_bf16_supported(self) -> bool:
        self._record("is_bf16_supported")
        return True


class FakeDeviceXpuBackend(XpuBackend):
    """`XpuBackend` whose `device_module` is the fake and whose tensors live on the CPU."""

    def __init__(self) -> None:
        super().__init__(device_index=0, attention="triton", cuda_graphs=False)
        self.device_module = FakeXpuModule()
        self.device = torch.device("cpu")

    def default_dtype(self):
        return "float32"  # the interpreter's dots are exact in float32 (see docs/backends/cuda.md)


def test_device_module_is_torch_xpu_and_names_xccl():
    backend = XpuBackend(device_index=0)
    assert backend.device_module is torch.xpu
    assert backend.device == torch.device("xpu", 0)
    assert backend.process_group_backend == "xccl" == torch.distributed.Backend.XCCL
    # the graph API the shared decode graphs call exists on torch.xpu as on torch.cuda
    assert callable(getattr(torch.xpu, backend.graph_class)) and callable(torch.xpu.graph)
    assert callable(torch.xpu.graph_pool_handle)


def test_memory_and_device_go_through_the_device_module():
    backend = FakeDeviceXpuBackend()
    fake = backend.device_module
    [device] = backend.devices()
    assert device == DeviceInfo(0, "Fake Intel Data Center GPU (driver 1.6.0)", 16 * GiB)
    backend.reserve_activation_memory(2 * GiB)
    memory = backend.memory_info()
    # free 12 GiB + 1 GiB cached - 2 GiB activations - 512 MiB margin
    assert memory.total == 16 * GiB and memory.free == 11 * GiB - 512 * 2**20
    assert {"get_device_properties", "mem_get_info", "memory_reserved", "memory_allocated"} <= set(fake.calls)
    fake.calls.clear()
    backend.synchronize()
    assert fake.calls == ["synchronize"]


def test_tensor_parallel_group_is_xccl(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda **kw: calls.append(kw))
    groups = []  # the command channel's side group: gloo on the host, whatever the device's collective
    monkeypatch.setattr(torch.distributed, "new_group", lambda **kw: groups.append(kw))
    monkeypatch.setattr("tgi.core.parallel.collective.create_store", lambda *args: None)  # no rank 0 here
    backend = XpuBackend(device_index=1)
    backend.create_collective(rank=1, world_size=2, init_method="tcp://127.0.0.1:1")
    assert groups == [{"backend": "gloo"}]
    [kw] = calls
    assert kw["backend"] == "xccl" and kw["rank"] == 1 and kw["world_size"] == 2
    assert kw["device_id"] == torch.device("xpu", 1)


def test_activation_profile_reads_the_device_module(tmp_path_factory):
    """The runner's activation profile (what sizes the KV cache on a GPU) asks torch.xpu, not torch.cuda."""
    from tgi.core.config import EngineConfig
    from tgi.core.loading import resolve_model
    from tgi.core.testing.model import write_tiny_llama

    backend = FakeDeviceXpuBackend()
    path = write_tiny_llama(tmp_path_factory.mktemp("xpu-profile"))
    config = EngineConfig(model_id=str(path), dtype="float32", max_batch_prefill_tokens=32, max_num_seqs=4)
    runner = backend.create_runner(resolve_model(str(path)), config)
    runner.load()  # tensors on the CPU: load() skips the profile, we run it by hand
    backend.device_module.calls.clear()
    peak = runner.profile_activation_memory()
    cache_bytes = runner.kv_cache_spec().bytes_per_block * -(-32 // config.block_size)  # its temporary cache
    assert peak == int((256 * 2**20 - cache_bytes) * 1.1)  # the fake's peak, less that cache, plus a tenth
    calls = backend.device_module.calls
    assert calls[:3] == ["synchronize", "empty_cache", "reset_peak_memory_stats"]
    assert "max_memory_allocated" in calls and calls[-1] == "empty_cache"
    assert backend._activation_bytes == peak


def test_tokens_equal_the_cpu_backend(tmp_path_factory):
    from tgi.backends.cpu.backend import CpuBackend
    from tgi.core.testing.model import write_tiny_llama

    path = write_tiny_llama(tmp_path_factory.mktemp("xpu-vs-cpu"))
    prompts = PROMPTS[1:]
    xpu = generate_greedy(path, "xpu", FakeDeviceXpuBackend, "float32", 16, prompts, max_new_tokens=6)
    cpu = generate_greedy(path, "cpu", CpuBackend, "float32", 16, prompts, max_new_tokens=6)
    assert xpu == cpu


def test_xpu_answers_as_cuda():
    """Everything but the device seam is `TritonBackend`'s: XpuBackend (with its device faked) states the
    interpreted CudaBackend's dtypes, attention and its caps, KV cache dtypes, weight formats and sampler,
    and overrides nothing else (its runner is `TritonBackend.create_runner`'s): the conformance suite that
    test_triton_interpret.py runs on CudaBackend covers xpu's code but for the seam."""
    from interpreted_cuda import InterpretedCudaBackend

    from tgi.backends.cuda.backend import CudaBackend
    from tgi.backends.triton_common.backend import TritonBackend

    assert XpuBackend.__bases__ == CudaBackend.__bases__ == (TritonBackend,)
    xpu, cuda = FakeDeviceXpuBackend(), InterpretedCudaBackend()
    assert xpu.supported_dtypes() == cuda.supported_dtypes()
    assert xpu.attention_names() == cuda.attention_names()
    assert xpu.attention().caps() == cuda.attention().caps()
    assert type(xpu.attention()) is type(cuda.attention()) and type(xpu.sampler()) is type(cuda.sampler())
    for dtype in xpu.supported_dtypes():
        assert xpu.kv_cache_dtypes(dtype) == cuda.kv_cache_dtypes(dtype)
        assert xpu.weight_formats(dtype) == cuda.weight_formats(dtype)
    own = {n for n in vars(XpuBackend) if not n.startswith("_")}
    assert own == {"name", "device_type", "graph_class", "process_group_backend", "devices"}, own
