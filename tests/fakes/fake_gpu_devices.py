"""A stand-in for `torch.cuda` with N devices that records which device each call binds, and a
`CudaBackend` on it whose collective and rank runner are stand-ins too: what a tensor-parallel rank does
with its device before any NCCL group or kernel exists, checked on a machine without a GPU."""

from __future__ import annotations

import json
import os
import threading

import torch

from tgi.backends.cuda.backend import CudaBackend
from tgi.core.interfaces import SingleProcessCollective


class FakeDeviceModule:
    """`torch.cuda` as far as binding a device goes: `device_count`, `current_device`, `set_device` (each
    call recorded in `set_device_calls`), `is_available`."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.current = 0
        self.set_device_calls: list[int] = []

    def is_available(self) -> bool:
        return self.count > 0

    def device_count(self) -> int:
        return self.count

    def current_device(self) -> int:
        return self.current

    def set_device(self, device: int | torch.device) -> None:
        index = device.index if isinstance(device, torch.device) else int(device)
        if not 0 <= index < self.count:
            raise RuntimeError(f"invalid device ordinal {index} (of {self.count})")
        self.set_device_calls.append(index)
        self.current = index


class _QuietCollective(SingleProcessCollective):
    """No NCCL here: the ranks exchange nothing. A worker's first command receive waits as a real one does
    for rank 0's broadcast, until rank 0 tells the process to leave (the worker's life thread ends it); a
    plain `SingleProcessCollective` has no `broadcast_bytes`, and the worker died of that at once, which rank
    0 logged as a failed rank."""

    def broadcast_bytes(self, data: bytes | None, src: int = 0, limit: int | None = None) -> bytes:
        if data is not None:
            return data  # rank 0's send reaches no one
        threading.Event().wait()
        raise AssertionError("unreachable")


class _StandInRunner:
    def shutdown(self) -> None:
        pass


class DeviceRecordingBackend(CudaBackend):
    """`CudaBackend` on `FakeDeviceModule(num_devices)`. When a rank makes its collective (the moment NCCL
    would read `device_id`), it writes what it is bound to into `record_dir/rank-<rank>.json`:
    the `set_device` calls so far, the current device, and the backend's `torch_device()`."""

    def __init__(self, record_dir: str, num_devices: int = 2) -> None:
        super().__init__(device_index=None, attention="triton", cuda_graphs=False)
        self.device_module = FakeDeviceModule(num_devices)
        self.device = torch.device("cuda", self.device_module.current_device())
        self.record_dir = record_dir

    def create_collective(self, rank: int, world_size: int, init_method: str | None = None):
        dm = self.device_module
        record = {
            "set_device_calls": dm.set_device_calls,
            "current_device": dm.current_device(),
            "torch_device": str(self.torch_device()),
        }
        with open(os.path.join(self.record_dir, f"rank-{rank}.json"), "w") as f:
            json.dump(record, f)
        return _QuietCollective()

    def create_rank_runner(self, source, config, collective):
        return _StandInRunner()
