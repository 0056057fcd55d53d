"""Where the ranks of a tensor-parallel group live: `--num-shard` ranks in all (vLLM's
`--tensor-parallel-size`), split evenly over `--nnodes` hosts. Node 0 holds ranks 0..per_node-1 (rank 0 is
the server's own process), node k ranks k*per_node..(k+1)*per_node-1; a rank's local rank (its place on its
host) picks its device. Torch-free: the flags' checks and the unit tests use it as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: the store's port when a group of several hosts names none (torch's own MASTER_PORT default)
DEFAULT_MULTI_NODE_PORT = 29500
#: seconds the group waits for a rank to join, and a collective for a peer that is alive but silent
#: (`--dist-timeout`); generous, as ranks load their weights between two collectives
DEFAULT_DIST_TIMEOUT_S = 600.0
#: the variable `TorchDistributedCollective` reads its timeout from (set from `--dist-timeout`)
ENV_TIMEOUT = "TGI_COLLECTIVE_TIMEOUT"


@dataclass(frozen=True)
class NodeLayout:
    """The ranks of one node of a group of `world_size` ranks over `nnodes` hosts."""

    world_size: int  # --num-shard: every rank of the group, all hosts together
    nnodes: int = 1  # --nnodes
    node_rank: int = 0  # --node-rank

    def __post_init__(self) -> None:
        problem = layout_problem(self.world_size, self.nnodes, self.node_rank)
        if problem is not None:
            raise ValueError(problem)

    @property
    def per_node(self) -> int:
        """Ranks on each host."""
        return self.world_size // self.nnodes

    @property
    def ranks(self) -> range:
        """The global ranks of this node, in local-rank order."""
        return range(self.node_rank * self.per_node, (self.node_rank + 1) * self.per_node)

    def global_rank(self, local_rank: int) -> int:
        if not 0 <= local_rank < self.per_node:
            raise ValueError(f"local rank {local_rank} out of [0, {self.per_node})")
        return self.node_rank * self.per_node + local_rank

    def local_rank(self, rank: int) -> int:
        """The place of global rank `rank` on its own host (its device there)."""
        return rank % self.per_node

    def node_of(self, rank: int) -> int:
        """The node that holds global rank `rank`."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} out of [0, {self.world_size})")
        return rank // self.per_node


def layout_problem(world_size: int, nnodes: int, node_rank: int) -> str | None:
    """Why `--num-shard world_size --nnodes nnodes --node-rank node_rank` is no group, or None."""
    if world_size < 1:
        return f"--num-shard must be >= 1, got {world_size}"
    if nnodes < 1:
        return f"--nnodes must be >= 1, got {nnodes}"
    if not 0 <= node_rank < nnodes:
        return f"--node-rank must be in [0, --nnodes {nnodes}), got {node_rank}"
    if world_size % nnodes:
        return (
            f"--num-shard {world_size} (the ranks of all hosts together) does not split evenly over "
            f"--nnodes {nnodes}"
        )
    return None


def apply_dist_timeout(seconds: float | None) -> None:
    """Make `--dist-timeout` the timeout of the collective this process creates next (None: keep it)."""
    if seconds is not None:
        os.environ[ENV_TIMEOUT] = repr(float(seconds))


def dist_timeout_s() -> float:
    """This process's join and collective timeout in seconds."""
    return float(os.environ.get(ENV_TIMEOUT, DEFAULT_DIST_TIMEOUT_S))
