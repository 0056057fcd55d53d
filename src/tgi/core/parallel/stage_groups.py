"""The process groups of a pipeline-parallel group of P stages × T shards, and what crosses between stages.

Every rank creates, in the same order (torch.distributed requires it), one group per stage (its T shards:
the tensor-parallel collective its layers use, `StageCollective`) and one group of all ranks for the
stage-to-stage traffic: point-to-point sends of activations (on the device's process-group backend; gloo on
the CPU; a tensor of the shape and dtype the receiver expects) and of the last stage's step output back to
rank 0 (JSON, each field checked, sealed with the group's key: host bytes over gloo, never a pickle). The
group of all ranks that carries rank 0's commands (`TorchDistributedCollective`) is left to them alone.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from tgi.core.interfaces.batch import StepOutput
from tgi.core.interfaces.collective import Collective, SingleProcessCollective
from tgi.core.parallel import wire
from tgi.core.parallel.collective import broadcast_tensor
from tgi.core.parallel.dist_auth import open_sealed, seal


class StageCollective(Collective):
    """The T shards of one pipeline stage, as a `Collective` whose rank is the shard's place in its stage
    (what the tensor-parallel layers take)."""

    def __init__(self, group: Any, ranks: list[int], global_rank: int) -> None:
        self.group, self.ranks = group, ranks
        self._rank = ranks.index(global_rank)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(tensor, group=self.group)
        return tensor

    def all_gather(self, tensor: torch.Tensor, dim: int = -1) -> torch.Tensor:
        tensor = tensor.contiguous()
        parts = [torch.empty_like(tensor) for _ in self.ranks]
        dist.all_gather(parts, tensor, group=self.group)
        return torch.cat(parts, dim=dim)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return broadcast_tensor(obj, self.ranks[src], self.group)  # tensors only: objects travel pickled

    def barrier(self) -> None:
        dist.barrier(group=self.group)


class StageLinks:
    """This rank's stage collective and its point-to-point links to the other stages."""

    def __init__(
        self, world: Collective, num_stages: int, tp_size: int, device: torch.device, key: bytes
    ) -> None:
        if world.world_size != num_stages * tp_size:
            raise ValueError(
                f"a group of {world.world_size} ranks is not {num_stages} stages × {tp_size} shards"
            )
        self.rank, self.key = world.rank, key  # the group's key (`dist_auth.command_key`)
        self._sent = self._received = 0  # step outputs, numbered in their seals
        mine = None
        for stage in range(num_stages):  # every rank creates every group, in the same order
            ranks = list(range(stage * tp_size, (stage + 1) * tp_size))
            group = dist.new_group(ranks) if tp_size > 1 else None
            if self.rank in ranks:
                mine = StageCollective(group, ranks, self.rank) if tp_size > 1 else SingleProcessCollective()
        self.stage_collective: Collective = mine
        self.device = device
        # host bytes always over gloo; activations over the device's backend (the same group on the CPU)
        self._bytes_group = dist.new_group(backend="gloo")
        on_host = device.type == "cpu" and dist.get_backend() == "gloo"
        self._activation_group = self._bytes_group if on_host else dist.new_group()

    def send_activations(self, tensor: torch.Tensor, dst: int) -> Any:
        """Start sending `tensor` to rank `dst`; returns the work to wait for (keep `tensor` until then)."""
        return dist.isend(tensor.contiguous(), dst, group=self._activation_group)

    def receive_activations(self, shape: tuple[int, ...], dtype: torch.dtype, src: int) -> torch.Tensor:
        tensor = torch.empty(shape, dtype=dtype, device=self.device)
        dist.recv(tensor, src, group=self._activation_group)
        return tensor

    def send_output(self, output: StepOutput, dst: int) -> None:
        """The last stage's step output to rank `dst` (rank 0): its JSON, sealed with the group's key and
        this link's sequence number, as a length and then its bytes over gloo."""
        data = seal(self.key, f"step-output/{self._sent}", wire.dumps(wire.to_data(output)))
        self._sent += 1
        dist.send(torch.tensor([len(data)], dtype=torch.int64), dst, group=self._bytes_group)
        dist.send(torch.frombuffer(bytearray(data), dtype=torch.uint8), dst, group=self._bytes_group)

    def receive_output(self, src: int) -> StepOutput:
        """The step output `send_output` sent from rank `src`; `AuthError` when its seal fails, `WireError`
        when it is not a step output or announces more than `wire.MAX_MESSAGE_BYTES`."""
        size = torch.empty(1, dtype=torch.int64)
        dist.recv(size, src, group=self._bytes_group)
        what = f"rank {src}'s step output {self._received}"
        if not 0 <= int(size.item()) <= wire.MAX_MESSAGE_BYTES:
            raise wire.WireError(f"{what}: {int(size.item())} bytes announced, more than allowed")
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
        dist.recv(payload, src, group=self._bytes_group)
        data = open_sealed(self.key, f"step-output/{self._received}", payload.numpy().tobytes(), what)
        self._received += 1
        return wire.from_data(StepOutput, wire.loads(data, what), what)
