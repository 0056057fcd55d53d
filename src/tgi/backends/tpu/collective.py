"""The collective interface on JAX: the devices of one host's mesh are the ranks.

`--num-shard N` runs one process over a 1-D `jax.sharding.Mesh` of N devices (axis `tp`), not N processes.
The model's code runs per device inside `jax.shard_map`; there, this collective's operations are the mesh's
(`all_reduce` = `lax.psum`, `all_gather` = `lax.all_gather`, `broadcast` = the source device's value). The
process itself is rank 0 of a group of `world_size` devices; `barrier` waits for the devices' queued work.
"""

from __future__ import annotations

from typing import Any

import jax

from tgi.core.interfaces import Collective

AXIS = "tp"


class MeshCollective(Collective):
    """Tensor-parallel communication over the mesh axis `AXIS` (valid inside the runner's `shard_map`)."""

    def __init__(self, mesh: jax.sharding.Mesh) -> None:
        self.mesh = mesh

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return self.mesh.shape[AXIS]

    def all_reduce(self, tensor: Any) -> Any:
        return jax.lax.psum(tensor, AXIS) if self.world_size > 1 else tensor

    def all_gather(self, tensor: Any, dim: int = -1) -> Any:
        if self.world_size == 1:
            return tensor
        return jax.lax.all_gather(tensor, AXIS, axis=dim % tensor.ndim, tiled=True)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if self.world_size == 1 or not isinstance(obj, jax.Array | jax.core.Tracer):
            return obj  # a host object: the one process has it already
        mine = jax.lax.axis_index(AXIS) == src
        return jax.lax.psum(jax.numpy.where(mine, obj, jax.numpy.zeros_like(obj)), AXIS)

    def barrier(self) -> None:
        jax.effects_barrier()
