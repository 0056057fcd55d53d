"""The Llama family (Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3) on core's abstract paged attention, and
the base of the other pre-norm decoders (Gemma, Phi-3, StarCoder2, Mixtral), which override the hooks.

The model never imports a backend: each forward receives an `AttentionContext` (attention backend, KV cache,
step metadata). Tokens are flat ([T]); prefill-chunk tokens come first, then one token per decoding
sequence, as `AttentionMetadata` describes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tgi.core.interfaces.types import AttentionLayerSpec
from tgi.core.models.attention import Attention
from tgi.core.models.base import CausalLM
from tgi.core.models.decoder import DecoderLayer, DecoderModel
from tgi.core.models.layers import GatedMLP, LinearFactory, RMSNorm
from tgi.core.models.rotary import rotary_dim_of


class LlamaForCausalLM(CausalLM):
    """Llama 2/3 and SmolLM2 (GQA, tied embeddings, llama3/linear/yarn rope scaling); the base of the
    variants below and of the other pre-norm decoders, which override the hooks."""

    architecture = "LlamaForCausalLM"

    # ---- architecture hooks (config -> structure); subclasses override
    @classmethod
    def qkv_bias(cls, config: Any) -> bool:
        return bool(getattr(config, "attention_bias", False))

    @classmethod
    def o_bias(cls, config: Any) -> bool:
        return bool(getattr(config, "attention_bias", False))

    @classmethod
    def mlp_bias(cls, config: Any) -> bool:
        return bool(getattr(config, "mlp_bias", False))

    def make_norm(self, width: int) -> nn.Module:
        return RMSNorm(width, self.config.rms_norm_eps, self.dtype, "meta")

    def make_qk_norm(self) -> Any:
        """None, or a norm factory for per-head q/k norms (Qwen3)."""
        return None

    def make_attention(self, spec: AttentionLayerSpec, layer_idx: int) -> nn.Module:
        config = self.config
        return Attention(
            config.hidden_size, spec, layer_idx, self.linear, self.dtype, "meta",
            qkv_bias=self.qkv_bias(config), o_bias=self.o_bias(config), qk_norm=self.make_qk_norm(),
            rotary_dim=rotary_dim_of(config),
        )  # fmt: skip

    def make_mlp(self, layer_idx: int) -> nn.Module:
        config = self.config
        return GatedMLP(
            config.hidden_size, config.intermediate_size, getattr(config, "hidden_act", "silu"),
            self.mlp_bias(config), self.linear, self.dtype, "meta",
        )  # fmt: skip

    def make_layer(self, layer_idx: int) -> nn.Module:
        spec = self.attention_specs[layer_idx]
        return DecoderLayer(
            self.config.hidden_size, self.make_attention(spec, layer_idx), self.make_mlp(layer_idx),
            self.make_norm,
        )  # fmt: skip

    # ---- construction
    def __init__(
        self,
        config: Any,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str = "cpu",
        linear: LinearFactory | None = None,
    ) -> None:
        super().__init__(config, dtype=dtype, device=device, linear=linear)
        self.model = DecoderModel(
            config.vocab_size, config.hidden_size, config.num_hidden_layers, self.make_layer,
            self.make_norm, self.linear, self.dtype, "meta",
        )  # fmt: skip
        self.lm_head = self.linear.lm_head(
            config.hidden_size, config.vocab_size, dtype=self.dtype, device="meta"
        )
        self.finish_init()


class MistralForCausalLM(LlamaForCausalLM):
    """Llama with a sliding window on every layer (when the config sets one)."""

    architecture = "MistralForCausalLM"

    @classmethod
    def qkv_bias(cls, config: Any) -> bool:
        return False

    o_bias = qkv_bias
    mlp_bias = qkv_bias

    @classmethod
    def sliding_window(cls, config: Any, layer_idx: int) -> int | None:
        layer_types = getattr(config, "layer_types", None)
        if layer_types is not None and getattr(config, "sliding_window", None) is not None:
            return super().sliding_window(config, layer_idx)
        return getattr(config, "sliding_window", None)


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Llama with q/k/v biases; sliding window only when `use_sliding_window`, on layers
    >= `max_window_layers` (as `config.layer_types` says in recent transformers)."""

    architecture = "Qwen2ForCausalLM"

    @classmethod
    def qkv_bias(cls, config: Any) -> bool:
        return True

    @classmethod
    def o_bias(cls, config: Any) -> bool:
        return False

    @classmethod
    def mlp_bias(cls, config: Any) -> bool:
        return False

    @classmethod
    def sliding_window(cls, config: Any, layer_idx: int) -> int | None:
        if not getattr(config, "use_sliding_window", False):
            return None
        window = getattr(config, "sliding_window", None)
        layer_types = getattr(config, "layer_types", None)
        if layer_types is not None:
            return window if layer_types[layer_idx] == "sliding_attention" else None
        return window if layer_idx >= getattr(config, "max_window_layers", 0) else None


class Qwen3ForCausalLM(Qwen2ForCausalLM):
    """Qwen2 with an RMS norm over each query and key head before the rotation (`q_norm`, `k_norm`), an
    explicit `head_dim`, and q/k/v biases only where `attention_bias` says."""

    architecture = "Qwen3ForCausalLM"

    @classmethod
    def qkv_bias(cls, config: Any) -> bool:
        return bool(getattr(config, "attention_bias", False))

    o_bias = qkv_bias

    def make_qk_norm(self) -> Any:
        return self.make_norm
