"""Gemma 3's text decoder: Gemma 2's layer (norms before and after attention and MLP, `query_pre_attn_scalar`,
scaled embeddings, (1 + w) norms) plus an RMS norm over each query and key head, and two rotary embeddings:
sliding-window layers rotate by `rope_parameters["sliding_attention"]` (the local base, 10k), the others by
`rope_parameters["full_attention"]` (1M, linearly scaled in the larger checkpoints); `config.layer_types`
says which layer is which."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tgi.core.models.context import AttentionContext
from tgi.core.models.gemma import Gemma2ForCausalLM
from tgi.core.models.rotary import RotaryEmbedding, head_dim_of

SLIDING, FULL = "sliding_attention", "full_attention"


def layer_type_rotary(config: Any, layer_type: str, device: torch.device | str) -> RotaryEmbedding:
    """The rotary embedding of one layer type, from `config.rope_parameters[layer_type]` (transformers 5's
    per-layer-type rope settings), computed as `Gemma3RotaryEmbedding` does."""
    params = config.rope_parameters[layer_type]
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        dim = head_dim_of(config)
        base = float(params["rope_theta"])
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        return RotaryEmbedding(inv_freq).to(device)
    if rope_type not in ("linear", "llama3", "yarn"):
        from tgi.core.models.registry import UnsupportedModelError

        raise UnsupportedModelError(f"Gemma 3: rope type '{rope_type}' of the {layer_type} layers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, device, layer_type=layer_type)
    return RotaryEmbedding(inv_freq.float(), float(scaling)).to(device)


class Gemma3ForCausalLM(Gemma2ForCausalLM):
    architecture = "Gemma3ForCausalLM"

    @classmethod
    def check_config(cls, config: Any) -> None:
        from tgi.core.models.registry import UnsupportedModelError

        if getattr(config, "use_bidirectional_attention", False):
            raise UnsupportedModelError(
                "Gemma 3 with use_bidirectional_attention (an embedding model, EmbeddingGemma) is not supported"
            )
        params = getattr(config, "rope_parameters", None)
        if not isinstance(params, dict) or not {SLIDING, FULL} <= set(params):
            raise UnsupportedModelError(
                "Gemma 3: the config has no per-layer-type rope_parameters (sliding_attention, "
                "full_attention); transformers 5 writes them"
            )

    def make_qk_norm(self) -> Any:
        return self.make_norm

    def finish_init(self) -> None:
        super().finish_init()
        self.rotary_by_type = {t: layer_type_rotary(self.config, t, self.device) for t in (SLIDING, FULL)}
        self.rotary = self.rotary_by_type[FULL]
        self.layer_types = list(self.config.layer_types)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        ctx: AttentionContext,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """As `CausalLM.forward`, each layer rotating by its layer type's embedding."""
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        cos_sin = {t: rotary.cos_sin(positions, x.dtype) for t, rotary in self.rotary_by_type.items()}
        residual = None
        layers: list[nn.Module] = list(self.decoder_layers())
        for layer in layers:
            cos, sin = cos_sin[self.layer_types[layer.self_attn.layer_idx]]
            x, residual = layer(x, residual, cos, sin, ctx)
        return self.final_norm(x, residual)
