"""The two ways a step's data crosses between the host and the device, so that a step waits once.

`to_device(values, dtype, device)`: host lists into a device tensor. Off the CPU the host tensor is pinned
(page-locked, from torch's caching host allocator, which keeps the block until the copy has run) and
copied with `non_blocking=True`: the host goes on building the step while the copy is queued, where a
pageable copy makes it wait for the device. On the CPU the host tensor is the result (no copy at all).

`to_host(*tensors)`: device tensors back as Python lists in one copy and one wait (the step's only
synchronisation): they are flattened into one float64 tensor (exact for int64 values below 2**53 and for
every float32), read with one `.tolist()` and split again; integer tensors come back as ints.
`start_to_host(*tensors)` queues that copy and returns at once; its `wait()` is the wait (overlapped steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def to_device(values: Sequence[Any], dtype: torch.dtype, device: torch.device | str | None) -> torch.Tensor:
    """`torch.tensor(values, dtype=dtype)` on `device`, copied without making the host wait (see module)."""
    host = torch.tensor(values, dtype=dtype)
    if device is None or torch.device(device).type == "cpu":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def to_host(*tensors: torch.Tensor) -> list[list]:
    """Each tensor's `.tolist()`, read back in one copy (see the module). Integer values must lie within
    +-2**53 (token ids, counts); nested shapes are kept."""
    return start_to_host(*tensors).wait()


class HostCopy:
    """A copy back `start_to_host` has queued: `wait()` gives what `to_host` would have."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], flat: torch.Tensor | None, done: Any) -> None:
        self._shapes = [(t.dtype.is_floating_point, t.numel(), list(t.shape)) for t in tensors]
        self._flat = flat
        self._done = done  # the device's event recorded after the copy; None: the copy has run

    def wait(self) -> list[list]:
        if self._flat is None:
            return []
        if self._done is not None:
            self._done.synchronize()
        values = self._flat.tolist()
        out, start = [], 0
        for floating, n, shape in self._shapes:
            part = values[start : start + n]
            start += n
            if not floating:
                part = [int(v) for v in part]
            out.append(_reshape(part, shape))
        return out


def start_to_host(*tensors: torch.Tensor) -> HostCopy:
    """Queue the one copy back of `to_host` without waiting for it (off the CPU: into pinned host memory,
    an event recorded after it), so that the host can go on while the device computes the tensors."""
    if not tensors:
        return HostCopy((), None, None)
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in tensors])
    if flat.device.type == "cpu":
        return HostCopy(tensors, flat, None)
    host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)
    host.copy_(flat, non_blocking=True)
    done = torch.get_device_module(flat.device.type).Event()
    done.record()
    return HostCopy(tensors, host, done)


def _reshape(flat: list, shape: list[int]) -> Any:
    if len(shape) <= 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_reshape(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
