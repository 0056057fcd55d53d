"""Tensor parallelism: `--num-shard N` runs N ranks as processes that each hold 1/N of the model.

- `TorchDistributedCollective`: the default `Collective` of torch backends, on `torch.distributed` with the
  backend's process-group name (gloo, nccl, hccl, xccl).
- `ParallelLinearFactory`: column-/row-parallel linears, a vocabulary-parallel embedding and output head,
  plugged into core's models through their `linear=` seam; `weight_selector(model)` makes every rank read
  only its slices of the checkpoint.
- `PipelineStageRunner` (`pipeline_runner.py`): with `--pipeline-parallel-size`, each rank's runner over its
  stage's layers (`stage_split.py`, `pipeline_model.py`), a step in micro-batches (`micro_batches.py`),
  activations sent stage to stage (`stage_groups.py`).
- `TensorParallelRunner`: rank 0's runner; spawns ranks 1..N-1 (`worker.py`), broadcasts every command
  to them over the group's collective (`command_channel.py`; a step as its delta from the last,
  `batch_delta.py`), runs its own shard, and brings everything down, naming the rank, when one dies.

Importing this package does not import torch; its modules do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tgi.core.parallel.collective import TorchDistributedCollective
    from tgi.core.parallel.layers import ParallelLinearFactory, check_tensor_parallel, weight_selector
    from tgi.core.parallel.runner import ShardFailure, TensorParallelRunner

_EXPORTS = {
    "TorchDistributedCollective": "tgi.core.parallel.collective",
    "ParallelLinearFactory": "tgi.core.parallel.layers",
    "check_tensor_parallel": "tgi.core.parallel.layers",
    "weight_selector": "tgi.core.parallel.layers",
    "ShardFailure": "tgi.core.parallel.runner",
    "TensorParallelRunner": "tgi.core.parallel.runner",
}

__all__ = [
    "ParallelLinearFactory",
    "ShardFailure",
    "TensorParallelRunner",
    "TorchDistributedCollective",
    "check_tensor_parallel",
    "weight_selector",
]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
