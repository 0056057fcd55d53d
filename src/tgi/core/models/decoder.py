"""The pre-norm decoder most native models share (Llama, Mistral, Qwen2/3, Phi-3, StarCoder2, Gemma,
Mixtral): `x + attn(norm(x))`, then `+ mlp(norm(.))`, with each residual add fused into the next norm;
and the model body `model.{embed_tokens, layers, norm}` as Hugging Face names it."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tgi.core.models.context import AttentionContext
from tgi.core.models.layers import LinearFactory

#: makes a norm of a given width: norm_factory(width) -> module with forward(x, residual) -> (y, x + residual)
NormFactory = Callable[[int], nn.Module]


class DecoderLayer(nn.Module):
    """input_layernorm -> self_attn -> post_attention_layernorm (+ residual) -> mlp. `mlp` is any module
    [T, hidden] -> [T, hidden] (dense or mixture of experts); `mlp_name` its checkpoint name."""

    def __init__(
        self,
        hidden_size: int,
        self_attn: nn.Module,
        mlp: nn.Module,
        norm: NormFactory,
        mlp_name: str = "mlp",
    ) -> None:
        super().__init__()
        self.input_layernorm = norm(hidden_size)
        self.self_attn = self_attn
        self.post_attention_layernorm = norm(hidden_size)
        self._mlp_name = mlp_name
        setattr(self, mlp_name, mlp)

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        ctx: AttentionContext,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h, residual = self.input_layernorm(x, residual)
        h = self.self_attn(h, cos, sin, ctx)
        h, residual = self.post_attention_layernorm(h, residual)
        return getattr(self, self._mlp_name)(h), residual


class DecoderModel(nn.Module):
    """`embed_tokens`, `layers` (made by `make_layer(layer_idx)`) and the final `norm`."""

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        num_layers: int,
        make_layer: Callable[[int], nn.Module],
        norm: NormFactory,
        linear: LinearFactory,
        dtype: torch.dtype,
        device: object,
    ) -> None:
        super().__init__()
        self.embed_tokens = linear.embedding(vocab_size, hidden_size, dtype=dtype, device=device)
        self.layers = nn.ModuleList(make_layer(i) for i in range(num_layers))
        self.norm = norm(hidden_size)
