"""Tensor-parallel layers, made by `ParallelLinearFactory` for core's models (their `linear=` seam).

- column-parallel linear (output dim split; q/k/v and gate/up fused): no communication;
- row-parallel linear (input dim split): partial products summed with `Collective.all_reduce`, then bias;
- vocabulary-parallel embedding: each rank embeds the ids in its vocabulary range, `all_reduce` sums;
- vocabulary-parallel output head: each rank computes its logit columns, `all_gather` concatenates.

Attention is split by heads: rank r holds query heads [r*h/N, (r+1)*h/N) and the key/value heads they
read; when there are fewer key/value heads than ranks each is replicated on N / kv_heads ranks.

Every layer knows which slice of the checkpoint tensor it holds: `weight_slice(param_name, shard_id)` tells
`iter_weights` what to read (`weight_selector(model)`), and its `weight_loader` takes either that slice or
the whole tensor (and narrows it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tgi.core.config import ConfigError
from tgi.core.interfaces.collective import Collective
from tgi.core.loading.selection import WeightSelector
from tgi.core.models.layers import LinearFactory, linear

#: fused-module shard ids that hold key/value heads (replicated when kv_heads < tp_size)
KV_SHARD_IDS = ("k", "v")


def check_tensor_parallel(config: Any, tp_size: int) -> None:
    """Raise `ConfigError` with the reason when the model cannot be split over `tp_size` shards."""
    if tp_size == 1:
        return
    from tgi.core.models.registry import attention_layer_specs

    try:
        attention_layer_specs(config, tp_size)
    except ValueError as exc:
        raise ConfigError(f"--num-shard {tp_size}: {exc}") from None
    from tgi.core.models.registry import model_class_for

    for what, size in model_class_for(config).sharded_sizes(config).items():
        if size % tp_size:
            raise ConfigError(f"--num-shard {tp_size}: {what} {size} is not divisible by {tp_size} shards")
    # the vocabulary needs no check: it is padded to a multiple of tp_size (padding logits are dropped)


def _copy(dst: torch.Tensor, src: torch.Tensor, what: str) -> None:
    if tuple(dst.shape) != tuple(src.shape):
        raise ValueError(f"{what}: slice of shape {tuple(src.shape)} does not fit {tuple(dst.shape)}")
    dst.copy_(src)


class ColumnParallelLinear(nn.Module):
    """`y = x W_r^T + b_r` with W's output rows split over ranks. Several fused parts (q/k/v, gate/up) each
    split on their own; a part with `replicas > 1` is shared by that many consecutive ranks."""

    def __init__(
        self,
        in_features: int,
        output_sizes: Sequence[int],  # per rank
        shard_ids: Sequence[object] | None,  # None: a plain (unfused) linear
        replicas: Sequence[int],
        bias: bool,
        tp_rank: int,
        tp_size: int,
        dtype: torch.dtype,
        device: object,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, sum(output_sizes)
        self.weight = nn.Parameter(torch.empty(self.out_features, in_features, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.empty(self.out_features, dtype=dtype, device=device)) if bias else None
        if shard_ids is not None:
            self.shard_ids = list(shard_ids)  # what load_weights expects from the checkpoint
        # shard id -> (offset in this rank's rows, rows, offset in the checkpoint tensor, checkpoint rows)
        self._parts: dict[object, tuple[int, int, int, int]] = {}
        local = 0
        for sid, size, rep in zip(shard_ids or [None], output_sizes, replicas, strict=True):
            self._parts[sid] = (local, size, (tp_rank // rep) * size, size * tp_size // rep)
            local += size

    linear_kernel = None  # see tgi.core.models.layers.linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(self, x, self.bias)

    def weight_slice(self, param_name: str, shard_id: object = None) -> tuple[slice, ...]:
        _, size, start, _ = self._parts[shard_id]
        return (slice(start, start + size),)

    def weight_loader(self, param: torch.Tensor, tensor: torch.Tensor, shard_id: object = None) -> None:
        if shard_id not in self._parts:
            raise ValueError(f"unknown shard {shard_id!r} (known: {list(self._parts)})")
        local, size, start, full = self._parts[shard_id]
        if tensor.shape[0] == full and full != size:
            tensor = tensor.narrow(0, start, size)
        _copy(param.data.narrow(0, local, size), tensor, f"rows {start}:{start + size} of {full}")


class RowParallelLinear(nn.Module):
    """`y = all_reduce(x_r W_r^T) + b` with W's input columns split over ranks (x arrives split)."""

    def __init__(
        self,
        in_features: int,  # whole
        out_features: int,
        bias: bool,
        collective: Collective,
        dtype: torch.dtype,
        device: object,
    ) -> None:
        super().__init__()
        tp = collective.world_size
        if in_features % tp:
            raise ValueError(f"input size {in_features} is not divisible by {tp} shards")
        self.collective = collective
        self.in_features, self.out_features = in_features // tp, out_features
        self._start = collective.rank * self.in_features
        self.weight = nn.Parameter(torch.empty(out_features, self.in_features, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype, device=device)) if bias else None

    linear_kernel = None  # see tgi.core.models.layers.linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.collective.all_reduce(linear(self, x, None))
        return y + self.bias if self.bias is not None else y

    def weight_slice(self, param_name: str, shard_id: object = None) -> object:
        if param_name == "bias":
            return True
        return (slice(None), slice(self._start, self._start + self.in_features))

    def weight_loader(self, param: torch.Tensor, tensor: torch.Tensor, shard_id: object = None) -> None:
        if param is self.weight and tensor.shape[1] != self.in_features:
            tensor = tensor.narrow(1, self._start, self.in_features)
        _copy(param.data, tensor, "row-parallel weight")


class _VocabParallel(nn.Module):
    """Rows [start, end) of a [vocab, hidden] matrix, padded to `ceil(vocab / tp)` rows per rank."""

    def __init__(
        self, vocab_size: int, hidden: int, collective: Collective, dtype: torch.dtype, device: object
    ) -> None:
        super().__init__()
        tp = collective.world_size
        self.collective = collective
        self.vocab_size = vocab_size
        self.rows = -(-vocab_size // tp)
        self.start = min(collective.rank * self.rows, vocab_size)
        self.end = min(self.start + self.rows, vocab_size)
        self.weight = nn.Parameter(torch.empty(self.rows, hidden, dtype=dtype, device=device))

    def weight_slice(self, param_name: str, shard_id: object = None) -> tuple[slice, ...]:
        return (slice(self.start, self.end),)

    def weight_loader(self, param: torch.Tensor, tensor: torch.Tensor, shard_id: object = None) -> None:
        n = self.end - self.start
        if tensor.shape[0] == self.vocab_size and n != self.vocab_size:
            tensor = tensor.narrow(0, self.start, n)
        _copy(param.data[:n], tensor, f"vocabulary rows {self.start}:{self.end}")
        param.data[n:].zero_()  # padding rows: zero embeddings, zero logits (dropped)


class VocabParallelEmbedding(_VocabParallel):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mine = (ids >= self.start) & (ids < self.end)
        x = F.embedding(torch.where(mine, ids - self.start, 0), self.weight)
        return self.collective.all_reduce(x * mine.unsqueeze(-1).to(x.dtype))


class ParallelLMHead(_VocabParallel):
    linear_kernel = None  # see tgi.core.models.layers.linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.collective.all_gather(linear(self, x, None), dim=-1)
        return logits[..., : self.vocab_size]


class ParallelLinearFactory(LinearFactory):
    """The tensor-parallel `LinearFactory`: shard sizes come in per rank (as core's models compute them
    from `tp_size`); `kv_replicas` is how many ranks share each key/value head (1 unless the model has
    fewer key/value heads than ranks). Build it with `for_config`."""

    def __init__(self, collective: Collective, kv_replicas: int = 1) -> None:
        self.collective = collective
        self.tp_size = collective.world_size
        self.tp_rank = collective.rank
        self.kv_replicas = kv_replicas

    @classmethod
    def for_config(cls, collective: Collective, config: Any) -> ParallelLinearFactory:
        from tgi.core.models.registry import model_class_for

        kv_heads = model_class_for(config).num_kv_heads(config)
        return cls(collective, max(1, collective.world_size // kv_heads))

    def column(
        self, in_features: int, out_features: int, bias: bool, *, dtype: torch.dtype, device: object
    ) -> nn.Module:
        if out_features % self.tp_size:
            raise ValueError(f"output size {out_features} is not divisible by {self.tp_size} shards")
        return ColumnParallelLinear(
            in_features, [out_features // self.tp_size], None, [1], bias,
            self.tp_rank, self.tp_size, dtype, device,
        )  # fmt: skip

    def merged_column(
        self,
        in_features: int,
        output_sizes: Sequence[int],
        shard_ids: Sequence[object],
        bias: bool,
        *,
        dtype: torch.dtype,
        device: object,
    ) -> nn.Module:
        replicas = [self.kv_replicas if s in KV_SHARD_IDS else 1 for s in shard_ids]
        return ColumnParallelLinear(
            in_features, output_sizes, shard_ids, replicas, bias, self.tp_rank, self.tp_size, dtype, device
        )

    def row(
        self, in_features: int, out_features: int, bias: bool, *, dtype: torch.dtype, device: object
    ) -> nn.Module:
        return RowParallelLinear(in_features, out_features, bias, self.collective, dtype, device)

    def embedding(self, num_embeddings: int, dim: int, *, dtype: torch.dtype, device: object) -> nn.Module:
        return VocabParallelEmbedding(num_embeddings, dim, self.collective, dtype, device)

    def lm_head(self, in_features: int, vocab_size: int, *, dtype: torch.dtype, device: object) -> nn.Module:
        return ParallelLMHead(vocab_size, in_features, self.collective, dtype, device)


def weight_selector(model: nn.Module) -> WeightSelector:
    """What this rank reads of each checkpoint tensor: its slice for the parallel layers, all of it for
    replicated ones (norms), nothing for tensors the model skips."""
    modules = dict(model.named_modules())

    def select(name: str) -> object:
        if model.skip_weight(name):
            return False
        target, shard = model.checkpoint_target(name)
        module_name, _, param_name = target.rpartition(".")
        weight_slice = getattr(modules.get(module_name), "weight_slice", None)
        if weight_slice is None:
            return True
        try:
            return weight_slice(param_name, shard)
        except KeyError:
            return True  # an unknown shard: read it whole, load_weights names the problem

    return select
