"""One pipeline stage's part of a model: only its decoder layers (and the embedding, or the final norm and
output head, where `PipelineStage` says), built on the meta device and materialised on the device, so that a
stage never allocates the others' weights; its forward over its layers; its share of the KV cache.

Served for the Llama family (Llama, Mistral, Qwen2, Qwen3: core's pre-norm decoder with the plain forward
loop); any other model is refused by name with `--pipeline-parallel-size` > 1.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tgi.core.config import ConfigError
from tgi.core.loading.selection import WeightSelector
from tgi.core.models.context import AttentionContext, token_seq_lens
from tgi.core.models.rotary import rotary_embedding
from tgi.core.parallel.stage_split import PipelineStage, stage_holds
from tgi.core.torch.kv_cache import KVCache

#: the architectures whose stages this module builds: core's Llama-family decoder, forward loop unchanged
PIPELINE_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


def check_pipeline_model(model_cls: type, hf_config: Any, num_stages: int) -> None:
    """`ConfigError` naming the model when it cannot be split in `num_stages` stages."""
    flag = f"--pipeline-parallel-size {num_stages}"
    if getattr(model_cls, "architecture", None) not in PIPELINE_ARCHITECTURES:
        raise ConfigError(
            f"{flag}: {getattr(model_cls, 'architecture', model_cls.__name__)} is not split in pipeline stages "
            f"(served: {', '.join(PIPELINE_ARCHITECTURES)})"
        )
    if getattr(hf_config, "quantization_config", None) is not None:
        raise ConfigError(f"{flag}: a quantized checkpoint; pipeline stages load dense weights only")
    if hf_config.num_hidden_layers < num_stages:
        raise ConfigError(
            f"{flag}: the model has {hf_config.num_hidden_layers} decoder layers, fewer than the stages"
        )


class NotInStage(nn.Module):
    """Stands for a module another stage holds: no parameters; calling it is a bug."""

    def forward(self, *args: Any) -> Any:
        raise RuntimeError("this module belongs to another pipeline stage")


def build_stage_model(
    model_cls: type, hf_config: Any, stage: PipelineStage, dtype: torch.dtype, device: Any, linear: Any
) -> nn.Module:
    """`model_cls` with only `stage`'s modules, their parameters empty on `device` (`load_weights` fills
    them); the tied output head of the last stage is its embedding table."""
    model = model_cls(hf_config, dtype=dtype, device="meta", linear=linear)
    layers = model.model.layers
    for i in range(len(layers)):
        if i not in stage.layers:
            layers[i] = NotInStage()
    if not stage.holds_embedding:
        model.model.embed_tokens = NotInStage()
    if not stage.is_last:
        model.model.norm = NotInStage()
        model.lm_head = NotInStage()
    model.device = torch.device(device)
    model.to_empty(device=model.device)  # (materialising unties the head: tied again below)
    if stage.is_last and model.tie_word_embeddings:
        model.lm_head.weight = model.get_parameter(model.embed_param)
    model.rotary = rotary_embedding(hf_config, model.device)
    return model


def stage_selector(stage: PipelineStage, select: WeightSelector | None) -> WeightSelector:
    """`select` (tensor parallelism's slices, or None: whole tensors) for the tensors `stage` holds only."""

    def selected(name: str) -> object:
        if not stage_holds(stage, name):
            return False
        return True if select is None else select(name)

    return selected


def stage_forward(
    model: nn.Module,
    stage: PipelineStage,
    hidden: torch.Tensor,
    residual: torch.Tensor | None,
    positions: torch.Tensor,
    ctx: AttentionContext,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `stage`'s decoder layers: hidden [T, H] (the first stage: the embeddings) and the residual
    stream ([T, H], None before the first layer) in, both out."""
    seq_lens = token_seq_lens(ctx.meta, hidden.shape[0]) if model.rotary.needs_seq_lens else None
    cos, sin = model.rotary.cos_sin(positions, hidden.dtype, seq_lens)
    layers = model.model.layers
    for i in stage.layers:
        hidden, residual = layers[i](hidden, residual, cos, sin, ctx)
    return hidden, residual


class StageKVCache(KVCache):
    """A stage's KV cache: its layers only, addressed by their global layer index."""

    def __init__(self, inner: KVCache, first_layer: int) -> None:
        super().__init__(inner.spec, inner.num_blocks)
        self.inner, self.first_layer = inner, first_layer

    def write(
        self, layer_idx: int, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        self.inner.write(layer_idx - self.first_layer, key, value, slot_mapping)

    def layer(self, layer_idx: int) -> Any:
        return self.inner.layer(layer_idx - self.first_layer)
