"""Falcon (7B/40B/180B shapes): attention and MLP in parallel from the same (or, in the "new decoder
architecture", their own) layer norm, multi-query or grouped key/value heads, one fused `query_key_value`
projection whose checkpoint layout depends on the variant (reordered here into q | k | v), rotary
positions. ALiBi variants are refused."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tgi.core.interfaces.types import AttentionLayerSpec
from tgi.core.models.attention import Attention
from tgi.core.models.base import CausalLM
from tgi.core.models.context import AttentionContext
from tgi.core.models.layers import MLP, LayerNorm, LinearFactory
from tgi.core.models.registry import UnsupportedModelError


class FalconDecoderLayer(nn.Module):
    """Parallel: `x + attn(ln_a(x)) + mlp(ln_m(x))` (ln_a = ln_m = `input_layernorm` unless the config has
    two norms, `ln_attn` and `ln_mlp`); sequential: `h = x + attn(ln(x))`, `h + mlp(ln2(h))`."""

    def __init__(self, config: Any, self_attention: nn.Module, mlp: nn.Module, norm: Any) -> None:
        super().__init__()
        self.parallel = bool(config.parallel_attn)
        self.two_norms = bool(config.new_decoder_architecture) and FalconForCausalLM.num_ln(config) == 2
        if self.two_norms:
            self.ln_attn, self.ln_mlp = norm(), norm()
        else:
            self.input_layernorm = norm()
            if not self.parallel:
                self.post_attention_layernorm = norm()
        self.self_attention = self_attention
        self.mlp = mlp

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        ctx: AttentionContext,
    ) -> tuple[torch.Tensor, None]:
        if self.two_norms:
            attn = self.self_attention(self.ln_attn(x)[0], cos, sin, ctx)
            return x + attn + self.mlp(self.ln_mlp(x)[0]), None
        h = self.input_layernorm(x)[0]
        attn = self.self_attention(h, cos, sin, ctx)
        if self.parallel:
            return x + attn + self.mlp(h), None
        h2, x = self.post_attention_layernorm(attn, x)
        return x + self.mlp(h2), None


class FalconModel(nn.Module):
    def __init__(self, word_embeddings: nn.Module, h: nn.ModuleList, ln_f: nn.Module) -> None:
        super().__init__()
        self.word_embeddings, self.h, self.ln_f = word_embeddings, h, ln_f


class FalconForCausalLM(CausalLM):
    architecture = "FalconForCausalLM"
    stacked_params = ()
    embed_param = "transformer.word_embeddings.weight"

    @classmethod
    def num_ln(cls, config: Any) -> int:
        n = getattr(config, "num_ln_in_parallel_attn", None)
        return 2 if n is None and config.new_decoder_architecture else (n or 1)

    @classmethod
    def check_config(cls, config: Any) -> None:
        if getattr(config, "alibi", False):
            raise UnsupportedModelError("Falcon with ALiBi positions (alibi=true) is not supported")
        if config.new_decoder_architecture and not config.parallel_attn:
            raise UnsupportedModelError(
                "Falcon's new decoder architecture without parallel attention is not supported"
            )
        if (
            not config.new_decoder_architecture
            and not config.multi_query
            and cls.num_kv_heads(config) != config.num_attention_heads
        ):
            raise UnsupportedModelError(
                "Falcon without multi-query or the new decoder architecture needs num_kv_heads equal to "
                f"num_attention_heads (got {cls.num_kv_heads(config)} and {config.num_attention_heads})"
            )

    @classmethod
    def num_kv_heads(cls, config: Any) -> int:
        if config.new_decoder_architecture:
            return config.num_kv_heads
        return 1 if config.multi_query else config.num_attention_heads

    @classmethod
    def head_dim(cls, config: Any) -> int:
        return config.hidden_size // config.num_attention_heads

    @classmethod
    def sharded_sizes(cls, config: Any) -> dict[str, int]:
        return {"the MLP's intermediate size": config.ffn_hidden_size}

    def make_layer(self, spec: AttentionLayerSpec, layer_idx: int) -> nn.Module:
        config, bias = self.config, bool(self.config.bias)
        attn = Attention(
            config.hidden_size, spec, layer_idx, self.linear, self.dtype, "meta",
            qkv_bias=bias, o_bias=bias, names=("query_key_value", "dense"),
        )  # fmt: skip
        mlp = MLP(
            config.hidden_size, config.ffn_hidden_size, config.activation, bias, self.linear, self.dtype,
            "meta", names=("dense_h_to_4h", "dense_4h_to_h"),
        )  # fmt: skip
        return FalconDecoderLayer(config, attn, mlp, self.make_norm)

    def make_norm(self) -> nn.Module:
        return LayerNorm(self.config.hidden_size, self.config.layer_norm_epsilon, self.dtype, "meta")

    def __init__(
        self,
        config: Any,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str = "cpu",
        linear: LinearFactory | None = None,
    ) -> None:
        super().__init__(config, dtype=dtype, device=device, linear=linear)
        embed = self.linear.embedding(config.vocab_size, config.hidden_size, dtype=self.dtype, device="meta")
        layers = nn.ModuleList(self.make_layer(s, i) for i, s in enumerate(self.attention_specs))
        self.transformer = FalconModel(embed, layers, self.make_norm())
        self.lm_head = self.linear.lm_head(
            config.hidden_size, config.vocab_size, dtype=self.dtype, device="meta"
        )
        self.finish_init()

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.transformer.word_embeddings(input_ids)

    def decoder_layers(self) -> nn.ModuleList:
        return self.transformer.h

    def final_norm(self, x: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
        return self.transformer.ln_f(x, residual)[0]

    def checkpoint_parts(self, name: str, tensor: torch.Tensor) -> list[tuple[str, object, torch.Tensor]]:
        if ".self_attention.query_key_value." not in name:
            return super().checkpoint_parts(name, tensor)
        config = self.config
        heads, kv_heads, d = config.num_attention_heads, self.num_kv_heads(config), self.head_dim(config)
        rest = tensor.shape[1:]
        if config.new_decoder_architecture:  # per key/value group: its query heads, then k, then v
            grouped = tensor.reshape(kv_heads, heads // kv_heads + 2, d, *rest)
            q, k, v = grouped[:, :-2], grouped[:, -2], grouped[:, -1]
        elif config.multi_query:  # all query heads, then the one k, then the one v
            q, k, v = tensor.split([heads * d, d, d])
        else:  # per head: q, k, v
            per_head = tensor.reshape(heads, 3, d, *rest)
            q, k, v = per_head[:, 0], per_head[:, 1], per_head[:, 2]
        parts = (q, k, v)
        return [(name, s, t.reshape(-1, *rest)) for s, t in zip("qkv", parts, strict=True)]
