"""The two ways a step's data crosses between the host and the device, so that a step waits once.

`to_device(values, dtype, device)`: host lists into a device tensor. Off the CPU the host tensor is pinned
(page-locked, from torch's caching host allocator, which keeps the block until the copy has run) and
copied with `non_blocking=True`: the host goes on building the step while the copy is queued, where a
pageable copy makes it wait for the device. On the CPU the host tensor is the result (no copy at all).

`to_host(*tensors)`: device tensors back as Python lists in one copy and one wait (the step's only
synchronisation): they are flattened into one float64 tensor (exact for int64 values below 2**53 and for
every float32), read with one `.tolist()` and split again; integer tensors come back as ints.
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
    if not tensors:
        return []
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in tensors])
    values = flat.tolist()
    out, start = [], 0
    for t in tensors:
        n = t.numel()
        part = values[start : start + n]
        start += n
        if not t.dtype.is_floating_point:
            part = [int(v) for v in part]
        out.append(_reshape(part, list(t.shape)))
    return out


def _reshape(flat: list, shape: list[int]) -> Any:
    if len(shape) <= 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_reshape(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
