"""Phi-3: Llama's shape with q/k/v and gate/up stored fused in the checkpoint (`qkv_proj`,
`gate_up_proj`, split here into the parts tensor parallelism shards), LongRoPE (see
`tgi.core.models.rotary.LongRotaryEmbedding`), partial rotary where the config says, and a sliding window on
every layer when the config sets one."""

from __future__ import annotations

from typing import Any

import torch

from tgi.core.models.llama import LlamaForCausalLM, MistralForCausalLM


class Phi3ForCausalLM(LlamaForCausalLM):
    architecture = "Phi3ForCausalLM"

    @classmethod
    def qkv_bias(cls, config: Any) -> bool:
        return False

    o_bias = qkv_bias
    mlp_bias = qkv_bias
    sliding_window = MistralForCausalLM.sliding_window

    def checkpoint_parts(self, name: str, tensor: torch.Tensor) -> list[tuple[str, object, torch.Tensor]]:
        config = self.config
        if ".self_attn.qkv_proj." in name:
            q = config.num_attention_heads * self.head_dim(config)
            kv = self.num_kv_heads(config) * self.head_dim(config)
            return [(name, s, t) for s, t in zip("qkv", tensor.split([q, kv, kv]), strict=True)]
        if ".mlp.gate_up_proj." in name:
            gate, up = tensor.split(config.intermediate_size)
            return [(name, "gate", gate), (name, "up", up)]
        return super().checkpoint_parts(name, tensor)
