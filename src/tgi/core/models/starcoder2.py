"""StarCoder2: Llama's attention (biases where `use_bias`), layer norms with biases, the two-matrix GELU
MLP (`c_fc`, `c_proj`), a sliding window on every layer when the config sets one."""

from __future__ import annotations

from typing import Any

from torch import nn

from tgi.core.models.layers import MLP, LayerNorm
from tgi.core.models.llama import LlamaForCausalLM, MistralForCausalLM


class Starcoder2ForCausalLM(LlamaForCausalLM):
    architecture = "Starcoder2ForCausalLM"

    @classmethod
    def qkv_bias(cls, config: Any) -> bool:
        return bool(config.use_bias)

    o_bias = qkv_bias
    mlp_bias = qkv_bias
    sliding_window = MistralForCausalLM.sliding_window

    def make_norm(self, width: int) -> nn.Module:
        return LayerNorm(width, self.config.norm_epsilon, self.dtype, "meta")

    def make_mlp(self, layer_idx: int) -> nn.Module:
        config = self.config
        return MLP(
            config.hidden_size, config.intermediate_size, config.hidden_act, self.mlp_bias(config),
            self.linear, self.dtype, "meta", names=("c_fc", "c_proj"),
        )  # fmt: skip
