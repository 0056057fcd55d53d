"""How rank 0 tells the other ranks of a tensor-parallel group what to run: one broadcast per command over
the group's own `torch.distributed` collective (`TorchDistributedCollective.broadcast_bytes`, host tensors
over gloo), no socket of its own.

A command is `{"name": ..., "args": [...]}` in JSON (`wire.py`; never a pickle), each command's arguments of
the types `ARG_TYPES` says, sealed with the group's key and its sequence number (`dist_auth.py`): a command
that fails its check, or that is not one of these, ends the worker with the reason. An `execute` step
travels as a `StepDelta` (`batch_delta.py`): what changed since the last step, never the whole batch; each
worker rebuilds the `ScheduledBatch` from its `BatchMirror`. Every rank sends and receives the same commands
in the same order, so the encoder on rank 0, the mirrors and the sequence numbers stay in step.
"""

from __future__ import annotations

from typing import Any

from tgi.core.interfaces.batch import TokenMasks
from tgi.core.parallel import wire
from tgi.core.parallel.batch_delta import BatchMirror, DeltaEncoder, SequenceDelta, StepDelta
from tgi.core.parallel.dist_auth import open_sealed, seal

#: each command's arguments (an `execute`'s one `StepDelta` is encoded on its own)
ARG_TYPES: dict[str, tuple[type, ...]] = {
    "load": (),
    "initialize_cache": (int,),
    "warmup": (int, int),
    "execute": (StepDelta,),
    "memory_info": (),
    "peak_memory": (),
    "check_lora_adapter": (str, str),
    "load_lora_adapter": (str, str),
    "unload_lora_adapter": (str,),
}


def encode_delta(delta: StepDelta) -> dict[str, Any]:
    masks = delta.token_masks
    return {
        "step": delta.step,
        "num_prefill_seqs": delta.num_prefill_seqs,
        "freed_request_ids": list(delta.freed_request_ids),
        "sequences": [wire.to_data(s) for s in delta.sequences],
        "token_masks": None if masks is None else wire.to_data(masks),
    }


def decode_delta(data: Any) -> StepDelta:
    what = "execute command"
    if not isinstance(data, dict) or set(data) != {
        "step",
        "num_prefill_seqs",
        "freed_request_ids",
        "sequences",
        "token_masks",
    }:
        raise wire.WireError(f"{what}: not a step delta")
    masks = data["token_masks"]
    if masks is not None:
        if not isinstance(masks, dict) or set(masks) != {"rows", "bitmask", "vocab_size"}:
            raise wire.WireError(f"{what}: token masks without rows, bitmask and vocab_size")
        masks = TokenMasks(
            rows=wire.check(masks["rows"], tuple[int, ...], f"{what}.token_masks.rows"),
            bitmask=wire.array_from_data(masks["bitmask"], f"{what}.token_masks.bitmask"),
            vocab_size=wire.check(masks["vocab_size"], int, f"{what}.token_masks.vocab_size"),
        )
    sequences = wire.check(data["sequences"], list[Any], f"{what}.sequences")
    return StepDelta(
        step=wire.check(data["step"], int, f"{what}.step"),
        num_prefill_seqs=wire.check(data["num_prefill_seqs"], int, f"{what}.num_prefill_seqs"),
        freed_request_ids=wire.check(data["freed_request_ids"], tuple[str, ...], f"{what}.freed_request_ids"),
        sequences=tuple(
            wire.from_data(SequenceDelta, s, f"{what}.sequences[{i}]") for i, s in enumerate(sequences)
        ),
        token_masks=masks,
    )


def encode_command(name: str, args: tuple) -> bytes:
    if name == "execute":
        args = (encode_delta(args[0]),)
    return wire.dumps({"name": name, "args": list(args)})


def decode_command(data: bytes) -> tuple[str, tuple]:
    message = wire.loads(data, "command")
    if not isinstance(message, dict) or set(message) != {"name", "args"}:
        raise wire.WireError("command: not a command's name and args")
    name, args = message["name"], message["args"]
    if name not in ARG_TYPES:
        raise wire.WireError(f"command: unknown command {name!r:.60}")
    types = ARG_TYPES[name]
    if not isinstance(args, list) or len(args) != len(types):
        raise wire.WireError(f"command {name}: expected {len(types)} argument(s)")
    if name == "execute":
        return name, (decode_delta(args[0]),)
    return name, tuple(
        wire.check(a, t, f"command {name}, argument {i}")
        for i, (a, t) in enumerate(zip(args, types, strict=True))
    )


class CommandSender:
    """Rank 0's end, sealing with `key` (`dist_auth.command_key`). `last_bytes` is the size of the last
    command broadcast (its sealed JSON)."""

    def __init__(self, collective: Any, key: bytes) -> None:
        self.collective, self.key = collective, key
        self.encoder = DeltaEncoder()
        self.last_bytes = 0
        self.sequence = 0

    def send(self, name: str, args: tuple) -> None:
        if name == "execute":
            (batch,) = args
            args = (self.encoder.encode(batch),)
        data = seal(self.key, f"command/{self.sequence}", encode_command(name, args))
        self.sequence += 1
        self.collective.broadcast_bytes(data, src=0)
        self.last_bytes = len(data)


class CommandReceiver:
    """A worker's end: `receive()` blocks until rank 0 broadcasts the next command, checks its seal (an
    `AuthError` when it fails) and returns it as the runner takes it (an `execute` with its
    `ScheduledBatch` rebuilt)."""

    def __init__(self, collective: Any, key: bytes) -> None:
        self.collective, self.key = collective, key
        self.mirror = BatchMirror()
        self.sequence = 0

    def receive(self) -> tuple[str, tuple]:
        sealed = self.collective.broadcast_bytes(None, src=0, limit=wire.MAX_MESSAGE_BYTES)
        what = f"rank 0's command {self.sequence}"
        data = open_sealed(self.key, f"command/{self.sequence}", sealed, what)
        self.sequence += 1
        name, args = decode_command(data)
        if name == "execute":
            args = (self.mirror.apply(args[0]),)
        return name, args
