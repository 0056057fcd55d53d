"""The default collective of torch backends: `torch.distributed` with the backend's process-group name."""

from __future__ import annotations

import datetime
from typing import Any

import torch
import torch.distributed as dist

from tgi.core.interfaces.collective import Collective
from tgi.core.parallel.rendezvous import create_store, gloo_interface
from tgi.core.parallel.topology import dist_timeout_s
from tgi.core.parallel.wire import MAX_MESSAGE_BYTES


def collective_timeout() -> datetime.timedelta:
    """How long a collective may wait for a peer that is alive but silent (a dead peer fails at once: its
    sockets close); also the rendezvous timeout (`--dist-timeout`, `topology.apply_dist_timeout`)."""
    return datetime.timedelta(seconds=dist_timeout_s())


def number_groups_afresh() -> None:
    """Number this process's next default group as a fresh process does. torch.distributed names a group
    by a per-process counter and keys its rendezvous by that name ("0/" for a fresh process's default
    group); only `destroy_process_group` resets the counter, so an earlier group that failed to form here
    (a rank that died on the way, an abandoned join) left it raised, and rank 0 would then wait under "1/"
    for ranks writing under "0/" until the rendezvous timeout. Called only while no group is initialised."""
    world = getattr(dist.distributed_c10d, "_world", None)
    if world is None or not hasattr(world, "group_count"):  # a torch that no longer numbers groups so
        raise RuntimeError(
            "torch.distributed no longer keeps `_world.group_count`: check how it names the default group"
        )
    world.group_count = 0


def broadcast_tensor(obj: Any, src: int, group: Any) -> Any:
    """`dist.broadcast` of a tensor; `TypeError` for anything else (it would be pickled)."""
    if not isinstance(obj, torch.Tensor):
        raise TypeError(
            f"only tensors are broadcast, not {type(obj).__name__}: objects would travel pickled (encode them "
            "as data and use broadcast_bytes)"
        )
    dist.broadcast(obj, src, group=group)
    return obj


class TorchDistributedCollective(Collective):
    """All ranks of one tensor-parallel group, on torch.distributed's default process group.

    `process_group_backend` is the backend's name for it (`TorchBackend.process_group_backend`: gloo for
    the CPU, nccl for CUDA/ROCm, hccl for Gaudi, xccl for Intel XPU). `init_method` is a torch rendezvous
    URL (`tcp://host:port`, `file://path`, see `tgi.core.parallel.rendezvous`). `close()` destroys the group (one group per process at a time).
    """

    def __init__(
        self,
        process_group_backend: str,
        rank: int,
        world_size: int,
        init_method: str,
        timeout: datetime.timedelta | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if dist.is_initialized():
            raise RuntimeError(
                "a torch.distributed process group is already initialised in this process: one tensor-"
                "parallel engine per process"
            )
        self._rank, self._world_size = rank, world_size
        self.device = torch.device(device) if device is not None else None
        kwargs = {}
        if self.device is not None and self.device.type != "cpu":
            kwargs["device_id"] = self.device
        timeout = timeout or collective_timeout()
        # rank 0's store binds to the rendezvous address only; gloo to loopback for a local group, else to
        # the interface that reaches the rendezvous address
        store = create_store(init_method, rank, world_size, timeout) if init_method else None
        number_groups_afresh()
        with gloo_interface(process_group_backend, init_method):
            dist.init_process_group(
                backend=process_group_backend,
                store=store,
                rank=rank,
                world_size=world_size,
                timeout=timeout,
                **kwargs,
            )
        # the command channel's group (`broadcast_bytes`): on the host CPU whatever the device's backend,
        # its sockets on loopback for a local group as the default group's
        self._control_group = None
        if "gloo" not in process_group_backend:
            with gloo_interface("gloo", init_method):
                self._control_group = dist.new_group(backend="gloo")

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(tensor)
        return tensor

    def all_gather(self, tensor: torch.Tensor, dim: int = -1) -> torch.Tensor:
        tensor = tensor.contiguous()
        parts = [torch.empty_like(tensor) for _ in range(self._world_size)]
        dist.all_gather(parts, tensor)
        return torch.cat(parts, dim=dim)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """A tensor is broadcast in place (every rank passes one of the same shape and dtype). Nothing else:
        an object would travel pickled, and unpickling another process's bytes runs its code (bytes go
        through `broadcast_bytes`, encoded as data)."""
        return broadcast_tensor(obj, src, None)

    def broadcast_bytes(self, data: bytes | None, src: int = 0, limit: int = MAX_MESSAGE_BYTES) -> bytes:
        """`data` of rank `src` to every rank (the others pass None), as host tensors over gloo (the
        default group when it is gloo, else a gloo group of the same ranks): its length, then its bytes. A
        receiver refuses a length over `limit` before it allocates anything."""
        group = self._control_group
        size = torch.tensor([len(data) if self._rank == src else 0], dtype=torch.int64)
        dist.broadcast(size, src, group=group)
        if self._rank != src and not 0 <= int(size.item()) <= limit:
            raise ValueError(f"rank {src} announced {int(size.item())} bytes, more than the {limit} allowed")
        if self._rank == src and data:
            payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        else:
            payload = torch.empty(int(size.item()), dtype=torch.uint8)  # (src: an empty `data`)
        if payload.numel():
            dist.broadcast(payload, src, group=group)
        return data if self._rank == src else payload.numpy().tobytes()

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
