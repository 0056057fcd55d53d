"""`no_host_sync()`: a region in which any torch call that would make the host wait for a GPU raises
`HostSyncError`, checked on CPU tensors. What a CUDA graph captures must hold none of them: capture fails
on a device-to-host read ("operation not permitted when stream is capturing"), and outside graphs each one
stalls the launch queue.

Refused: reading a value on the host (`.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `bool()`, `int()`,
`float()` of a tensor), and the ops whose output size depends on the data (`nonzero`, boolean-mask
indexing, `masked_select`, `unique`, `bincount`, `repeat_interleave` without `output_size`, `equal`).
A Triton kernel run by the interpreter is let through: on a GPU its launch does not wait.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


class HostSyncError(AssertionError):
    """A torch call inside `no_host_sync()` that waits for the device."""


_HOST_READS = {
    torch.Tensor.item: "Tensor.item()",
    torch.Tensor.tolist: "Tensor.tolist()",
    torch.Tensor.cpu: "Tensor.cpu()",
    torch.Tensor.numpy: "Tensor.numpy()",
    torch.Tensor.__bool__: "bool(tensor)",
    torch.Tensor.__int__: "int(tensor)",
    torch.Tensor.__float__: "float(tensor)",
}
_DATA_DEPENDENT_OPS = {
    aten._local_scalar_dense.default: "a tensor's value read on the host",
    aten.is_nonzero.default: "bool(tensor)",
    aten.nonzero.default: "nonzero",
    aten.masked_select.default: "masked_select",
    aten.bincount.default: "bincount (reads the min and max back on CUDA)",
    aten.equal.default: "torch.equal",
    aten._unique2.default: "unique",
    aten.unique_dim.default: "unique",
    aten.unique_consecutive.default: "unique_consecutive",
}


def _is_mask(index: object) -> bool:
    return isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)


class _HostReads(TorchFunctionMode):
    def __init__(self, guard: _Guard) -> None:
        super().__init__()
        self.guard = guard

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.guard.suspended:
            what = _HOST_READS.get(func)
            if func is torch.Tensor.to and _to_host(args, kwargs):
                what = "Tensor.to('cpu')"
            if what is not None:
                raise HostSyncError(f"{what} inside a region that must not wait for the device")
        return func(*args, **kwargs)


def _to_host(args: tuple, kwargs: dict) -> bool:
    device = kwargs.get("device")
    for arg in args[1:]:
        if isinstance(arg, (str, torch.device)):
            device = arg
    return device is not None and torch.device(device).type == "cpu"


class _DataDependentOps(TorchDispatchMode):
    def __init__(self, guard: _Guard) -> None:
        super().__init__()
        self.guard = guard

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.guard.suspended:
            what = _DATA_DEPENDENT_OPS.get(func)
            if func in (aten.repeat_interleave.Tensor, aten.repeat_interleave.self_Tensor):
                if kwargs.get("output_size") is None:
                    what = "repeat_interleave without output_size (sums the repeats on the host)"
            if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default):
                if any(_is_mask(i) for i in args[1]):
                    what = "indexing by a boolean mask (nonzero on the host)"
            if what is not None:
                raise HostSyncError(f"{what} inside a region that must not wait for the device")
        return func(*args, **kwargs)


class _Guard:
    def __init__(self) -> None:
        self.suspended = 0


@contextlib.contextmanager
def _interpreted_kernels_allowed(guard: _Guard) -> Iterator[None]:
    """Triton's interpreter copies a kernel's arguments to numpy and back: no sync of a GPU launch."""
    try:
        from triton.runtime.interpreter import GridExecutor
    except ImportError:
        yield
        return
    run = GridExecutor.__call__

    def launch(self, *args, **kwargs):
        guard.suspended += 1
        try:
            return run(self, *args, **kwargs)
        finally:
            guard.suspended -= 1

    GridExecutor.__call__ = launch
    try:
        yield
    finally:
        GridExecutor.__call__ = run


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Raise `HostSyncError` on any call in the block that would wait for the device (see the module)."""
    guard = _Guard()
    with _interpreted_kernels_allowed(guard), _HostReads(guard), _DataDependentOps(guard):
        yield
