"""Decoders saved without their language-model head (what sentence-transformers saves of Qwen3-Embedding
and other decoder embedders: transformers' `Qwen3Model`, `LlamaModel`, ...), on core's native models: the
same layers and paged attention as the causal LM, their tensors named without the `model.` prefix. They
only pool (a pooling runner never asks for their logits; the head is tied to the embeddings for nothing)."""

from __future__ import annotations

import torch

from tgi.core.models.llama import LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM


class _BaseModelNames:
    """Checkpoint names of a base model (`layers.0...`) read as the causal LM's (`model.layers.0...`)."""

    def checkpoint_parts(self, name: str, tensor: torch.Tensor) -> list[tuple[str, object, torch.Tensor]]:
        if not name.startswith(("model.", "lm_head.")):
            name = "model." + name
        return super().checkpoint_parts(name, tensor)


class LlamaEmbedder(_BaseModelNames, LlamaForCausalLM):
    architecture = "LlamaModel"


class Qwen2Embedder(_BaseModelNames, Qwen2ForCausalLM):
    architecture = "Qwen2Model"


class Qwen3Embedder(_BaseModelNames, Qwen3ForCausalLM):
    architecture = "Qwen3Model"
