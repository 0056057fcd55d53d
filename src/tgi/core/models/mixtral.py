"""Mixture-of-experts decoders: Mixtral (Mistral's attention, `block_sparse_moe` with experts w1/w3/w2),
Qwen2-MoE (Qwen2's attention, a shared expert beside the routed ones) and Qwen3-MoE (Qwen3's attention);
the Qwen models may keep dense MLPs on some layers (`mlp_only_layers`, `decoder_sparse_step`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from tgi.core.models.decoder import DecoderLayer
from tgi.core.models.layers import GatedMLP
from tgi.core.models.llama import MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM
from tgi.core.models.moe import SparseMoE, expert_target


class MixtralForCausalLM(MistralForCausalLM):
    architecture = "MixtralForCausalLM"
    expert_parts = {"w1": "gate", "w3": "up", "w2": "down"}
    moe_name = "block_sparse_moe"

    @classmethod
    def sharded_sizes(cls, config: Any) -> dict[str, int]:
        return {"the experts' intermediate size": config.intermediate_size}

    def make_mlp(self, layer_idx: int) -> nn.Module:
        c = self.config
        return SparseMoE(
            c.hidden_size, c.num_local_experts, c.num_experts_per_tok, c.intermediate_size, c.hidden_act,
            True, self.linear, self.dtype, "meta",
        )  # fmt: skip

    def make_layer(self, layer_idx: int) -> nn.Module:
        spec = self.attention_specs[layer_idx]
        return DecoderLayer(
            self.config.hidden_size, self.make_attention(spec, layer_idx), self.make_mlp(layer_idx),
            self.make_norm, mlp_name=self.moe_name,
        )  # fmt: skip

    def checkpoint_target(self, name: str) -> tuple[str, object]:
        return expert_target(name, self.expert_parts) or super().checkpoint_target(name)


class _QwenMoE:
    """What Qwen2-MoE and Qwen3-MoE share: sparse layers where the config puts them, Qwen's expert names."""

    expert_parts = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down"}
    moe_name = "mlp"
    shared_expert = False

    @classmethod
    def is_sparse(cls, config: Any, layer_idx: int) -> bool:
        return (
            layer_idx not in (getattr(config, "mlp_only_layers", None) or [])
            and config.num_experts > 0
            and (layer_idx + 1) % config.decoder_sparse_step == 0
        )

    @classmethod
    def sharded_sizes(cls, config: Any) -> dict[str, int]:
        sizes = {"the experts' intermediate size": config.moe_intermediate_size}
        if not all(cls.is_sparse(config, i) for i in range(config.num_hidden_layers)):
            sizes["the MLP's intermediate size"] = config.intermediate_size
        if cls.shared_expert:
            sizes["the shared expert's intermediate size"] = config.shared_expert_intermediate_size
        return sizes

    def dense_mlp(self, intermediate_size: int) -> nn.Module:
        c = self.config
        return GatedMLP(
            c.hidden_size, intermediate_size, c.hidden_act, False, self.linear, self.dtype, "meta"
        )

    def make_mlp(self, layer_idx: int) -> nn.Module:
        c = self.config
        if not self.is_sparse(c, layer_idx):
            return self.dense_mlp(c.intermediate_size)
        shared = self.dense_mlp(c.shared_expert_intermediate_size) if self.shared_expert else None
        return SparseMoE(
            c.hidden_size, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size, c.hidden_act,
            bool(c.norm_topk_prob), self.linear, self.dtype, "meta", shared_expert=shared,
        )  # fmt: skip

    def checkpoint_target(self, name: str) -> tuple[str, object]:
        return expert_target(name, self.expert_parts) or super().checkpoint_target(name)


class Qwen2MoeForCausalLM(_QwenMoE, Qwen2ForCausalLM):
    architecture = "Qwen2MoeForCausalLM"
    shared_expert = True


class Qwen3MoeForCausalLM(_QwenMoE, Qwen3ForCausalLM):
    architecture = "Qwen3MoeForCausalLM"
