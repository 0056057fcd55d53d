"""Gemma and Gemma 2: Llama's shape with embeddings scaled by sqrt(hidden), RMS norms whose weight is an
offset from 1, a GELU (tanh) gated MLP; Gemma 2 adds norms after attention and after the MLP, attention
scaled by `query_pre_attn_scalar`, soft-capped attention and final logits, and a sliding window on
alternate layers (`config.layer_types`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tgi.core.models.context import AttentionContext
from tgi.core.models.layers import GatedMLP, OffsetRMSNorm
from tgi.core.models.llama import LlamaForCausalLM


class GemmaForCausalLM(LlamaForCausalLM):
    architecture = "GemmaForCausalLM"

    @classmethod
    def hidden_act(cls, config: Any) -> str:
        return config.hidden_act  # transformers reads a legacy "gelu" as the tanh approximation

    def make_norm(self, width: int) -> nn.Module:
        return OffsetRMSNorm(width, self.config.rms_norm_eps, self.dtype, "meta")

    def make_mlp(self, layer_idx: int) -> nn.Module:
        config = self.config
        return GatedMLP(
            config.hidden_size, config.intermediate_size, self.hidden_act(config), False, self.linear,
            self.dtype, "meta",
        )  # fmt: skip

    def __init__(self, config: Any, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.embed_scale = config.hidden_size**0.5


class Gemma2DecoderLayer(nn.Module):
    """norm -> attention -> norm, + residual; norm -> MLP -> norm, + residual (the residual adds fused into
    the next layer's first norm, as in `DecoderLayer`)."""

    def __init__(self, self_attn: nn.Module, mlp: nn.Module, norm: Any, hidden_size: int) -> None:
        super().__init__()
        self.input_layernorm = norm(hidden_size)
        self.self_attn = self_attn
        self.post_attention_layernorm = norm(hidden_size)
        self.pre_feedforward_layernorm = norm(hidden_size)
        self.mlp = mlp
        self.post_feedforward_layernorm = norm(hidden_size)

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        ctx: AttentionContext,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h, residual = self.input_layernorm(x, residual)
        h, _ = self.post_attention_layernorm(self.self_attn(h, cos, sin, ctx))
        h, residual = self.pre_feedforward_layernorm(h, residual)
        h, _ = self.post_feedforward_layernorm(self.mlp(h))
        return h, residual


class Gemma2ForCausalLM(GemmaForCausalLM):
    architecture = "Gemma2ForCausalLM"

    @classmethod
    def hidden_act(cls, config: Any) -> str:
        return config.hidden_activation

    @classmethod
    def attention_scale(cls, config: Any) -> float:
        return config.query_pre_attn_scalar**-0.5

    @classmethod
    def attention_softcap(cls, config: Any) -> float | None:
        return getattr(config, "attn_logit_softcapping", None)

    def make_layer(self, layer_idx: int) -> nn.Module:
        spec = self.attention_specs[layer_idx]
        return Gemma2DecoderLayer(
            self.make_attention(spec, layer_idx), self.make_mlp(layer_idx), self.make_norm,
            self.config.hidden_size,
        )  # fmt: skip

    def __init__(self, config: Any, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        self.final_logit_softcap = getattr(config, "final_logit_softcapping", None)
