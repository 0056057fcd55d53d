"""How rank 0 tells the other ranks of a tensor-parallel group what to run: one broadcast per command over
the group's own `torch.distributed` collective (`TorchDistributedCollective.broadcast_bytes`, host tensors
over gloo), no socket of its own.

A command is `(name, args)`, pickled. An `execute` step travels as a `StepDelta` (`batch_delta.py`): what
changed since the last step, never the whole batch; each worker rebuilds the `ScheduledBatch` from its
`BatchMirror`. Every rank sends and receives the same commands in the same order, so the encoder on rank 0
and the mirrors stay in step.
"""

from __future__ import annotations

import pickle
from typing import Any

from tgi.core.parallel.batch_delta import BatchMirror, DeltaEncoder, StepDelta


class CommandSender:
    """Rank 0's end. `last_bytes` is the size of the last command broadcast (its pickled payload)."""

    def __init__(self, collective: Any) -> None:
        self.collective = collective
        self.encoder = DeltaEncoder()
        self.last_bytes = 0

    def send(self, name: str, args: tuple) -> None:
        if name == "execute":
            (batch,) = args
            args = (self.encoder.encode(batch),)
        data = pickle.dumps((name, args), protocol=pickle.HIGHEST_PROTOCOL)
        self.collective.broadcast_bytes(data, src=0)
        self.last_bytes = len(data)


class CommandReceiver:
    """A worker's end: `receive()` blocks until rank 0 broadcasts the next command and returns it as the
    runner takes it (an `execute` with its `ScheduledBatch` rebuilt)."""

    def __init__(self, collective: Any) -> None:
        self.collective = collective
        self.mirror = BatchMirror()

    def receive(self) -> tuple[str, tuple]:
        name, args = pickle.loads(self.collective.broadcast_bytes(None, src=0))
        if name == "execute":
            (delta,) = args
            if not isinstance(delta, StepDelta):
                raise TypeError(f"execute command carries {type(delta).__name__}, not a StepDelta")
            args = (self.mirror.apply(delta),)
        return name, args
