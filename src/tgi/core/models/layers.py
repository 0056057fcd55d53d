"""Building blocks of core's torch models: norms, linears (behind a factory so that tensor parallelism can
swap in sharded ones), and weight loaders attached to parameters.

A module may define `weight_loader(param, tensor, shard_id=None)` (and `shard_ids` for fused ones); a
model's `load_weights` calls it for the module's parameters with each checkpoint tensor, else it copies the
tensor as is. Sharded (tensor-parallel) linears will bring loaders that narrow the checkpoint tensor to
their rank's slice; the model code does not change. (Loaders live on modules, not on parameters, because
parameter attributes do not survive `Module.to_empty`.)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def default_weight_loader(param: torch.Tensor, tensor: torch.Tensor, shard_id: object = None) -> None:
    if tuple(param.shape) != tuple(tensor.shape):
        raise ValueError(f"weight of shape {tuple(tensor.shape)} does not fit parameter {tuple(param.shape)}")
    param.data.copy_(tensor)


def linear(module: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`x @ module.weight.T (+ bias)`, through the kernel a backend attached to the module after loading
    (`module.linear_kernel`, see `TorchBackend.prepare_model`), else `F.linear`. Every linear layer of core's
    models, sharded or not, computes its product here."""
    kernel = module.linear_kernel
    if kernel is not None:
        return kernel(x, bias)
    if module.weight.is_meta:
        raise RuntimeError(
            f"{type(module).__name__} has a quantized weight and no kernel: the backend did not attach one"
        )
    return F.linear(x, module.weight, bias)


class Linear(nn.Linear):
    """`nn.Linear` whose product a backend may replace (see `linear`)."""

    linear_kernel = None  # callable(x, bias) -> x @ weight.T + bias, set by a backend
    # the layer's quantized weight (a `tgi.core.quant.QuantizedWeight`: GPTQ, AWQ, FP8, int8, GGUF blocks),
    # attached at load; the backend's kernel computes with it (`tgi.core.quant.kernels`). Where that kernel
    # takes every row count, `weight` is then a meta tensor (shape and dtype only, no memory)
    quant_weight = None
    quant_format: str | None = None  # the format's name, kept once the kernel is attached

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(self, x, self.bias)


class MergedLinear(Linear):
    """Several linears with the same input fused along the output dim (q/k/v, or gate/up).
    `shard_ids` name the parts; the weight loader places each checkpoint tensor in its rows."""

    def __init__(
        self,
        in_features: int,
        output_sizes: Sequence[int],
        shard_ids: Sequence[object],
        bias: bool,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, sum(output_sizes), bias=bias, device=device, dtype=dtype)
        self.output_sizes = list(output_sizes)
        self.shard_ids = list(shard_ids)
        offsets = [0]
        for size in output_sizes:
            offsets.append(offsets[-1] + size)
        self._offsets = dict(zip(self.shard_ids, zip(offsets, self.output_sizes, strict=False), strict=True))

    def weight_loader(self, param: torch.Tensor, tensor: torch.Tensor, shard_id: object = None) -> None:
        if shard_id not in self._offsets:
            raise ValueError(f"unknown shard {shard_id!r} (known: {self.shard_ids})")
        offset, size = self._offsets[shard_id]
        default_weight_loader(param.data.narrow(0, offset, size), tensor)


class LinearFactory:
    """Creates the linears of a model. The default builds plain, unsharded layers; a tensor-parallel
    factory returns column-parallel layers (output dim sharded) from `column`/`merged_column`, row-parallel
    ones (input dim sharded, output all-reduced through a `Collective`) from `row`, and reports its
    `tp_size`/`tp_rank` so the model sizes its per-rank heads."""

    tp_size: int = 1
    tp_rank: int = 0

    def column(
        self, in_features: int, out_features: int, bias: bool, *, dtype: torch.dtype, device: object
    ) -> nn.Module:
        return Linear(in_features, out_features, bias=bias, dtype=dtype, device=device)

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
        return MergedLinear(in_features, output_sizes, shard_ids, bias, dtype=dtype, device=device)

    def row(
        self, in_features: int, out_features: int, bias: bool, *, dtype: torch.dtype, device: object
    ) -> nn.Module:
        return Linear(in_features, out_features, bias=bias, dtype=dtype, device=device)

    def embedding(self, num_embeddings: int, dim: int, *, dtype: torch.dtype, device: object) -> nn.Module:
        # given its (empty) table, nn.Embedding skips its random init: the weights come from the checkpoint,
        # and that init's first call imports torch._dynamo (~0.7 s of a load)
        table = torch.empty(num_embeddings, dim, dtype=dtype, device=device)
        return nn.Embedding(num_embeddings, dim, _weight=table)

    def lm_head(self, in_features: int, vocab_size: int, *, dtype: torch.dtype, device: object) -> nn.Module:
        return Linear(in_features, vocab_size, bias=False, dtype=dtype, device=device)


class RMSNorm(nn.Module):
    """RMS norm as Hugging Face computes it (statistics in float32, weight applied in the input dtype),
    with an optional fused residual add: `forward(x, residual)` returns `(norm(x + residual), x + residual)`."""

    #: callable(x, residual | None, weight, eps) -> (norm, x + residual) with this arithmetic, set by a backend
    norm_kernel = None

    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype, device: object = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype, device=device))
        self.eps = eps

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.norm_kernel is not None:
            return self.norm_kernel(x, residual, self.weight, self.eps)
        if residual is not None:
            x = x + residual
        return self._norm(x), x


def activation(name: str):
    """The MLP activation by its Hugging Face name."""
    if name in ("silu", "swish"):
        return F.silu
    from transformers.activations import ACT2FN

    return ACT2FN[name]


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)) with gate and up fused in one column linear."""

    #: callable(gate_up [T, 2 * I]) -> act(gate) * up [T, I], set by a backend (for `hidden_act` "silu")
    act_mul_kernel = None

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        hidden_act: str,
        bias: bool,
        linear: LinearFactory,
        dtype: torch.dtype,
        device: object,
    ) -> None:
        super().__init__()
        inter = intermediate_size // linear.tp_size
        self.gate_up_proj = linear.merged_column(
            hidden_size, [inter, inter], ["gate", "up"], bias, dtype=dtype, device=device
        )
        self.down_proj = linear.row(intermediate_size, hidden_size, bias, dtype=dtype, device=device)
        self.act = activation(hidden_act)
        self.hidden_act = hidden_act
        self._inter = inter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act_mul_kernel is not None:
            return self.down_proj(self.act_mul_kernel(self.gate_up_proj(x)))
        gate, up = self.gate_up_proj(x).split(self._inter, dim=-1)
        return self.down_proj(self.act(gate) * up)


class OffsetRMSNorm(nn.Module):
    """Gemma's RMS norm: the weight is stored as an offset from 1 and applied in float32 before the cast
    back (`(norm(x) * (1 + w)).to(dtype)`, where `RMSNorm` casts first). Same `forward(x, residual)`."""

    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype, device: object = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden_size, dtype=dtype, device=device))
        self.eps = eps

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is not None:
            x = x + residual
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).to(x.dtype), x


class LayerNorm(nn.Module):
    """`nn.LayerNorm` (weight and bias, in the input dtype) with the fused residual add of `RMSNorm`:
    `forward(x, residual)` returns `(norm(x + residual), x + residual)`."""

    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype, device: object = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(hidden_size, dtype=dtype, device=device))
        self.eps = eps

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is not None:
            x = x + residual
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps), x


class MLP(nn.Module):
    """down(act(up(x))): the two-matrix MLP (StarCoder2's c_fc/c_proj, Falcon's dense_h_to_4h/dense_4h_to_h);
    `names` are the checkpoint's names of the two linears."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        hidden_act: str,
        bias: bool,
        linear: LinearFactory,
        dtype: torch.dtype,
        device: object,
        names: tuple[str, str] = ("c_fc", "c_proj"),
    ) -> None:
        super().__init__()
        self._up, self._down = names
        setattr(
            self, self._up, linear.column(hidden_size, intermediate_size, bias, dtype=dtype, device=device)
        )
        setattr(
            self, self._down, linear.row(intermediate_size, hidden_size, bias, dtype=dtype, device=device)
        )
        self.act = activation(hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, self._down)(self.act(getattr(self, self._up)(x)))
