"""Which model class runs a Hugging Face config, and what the engine must know before loading it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tgi.core.interfaces.types import AttentionLayerSpec, KVCacheSpec


class UnsupportedModelError(ValueError):
    """The checkpoint's architecture (or one of its settings) is not implemented; the message says which."""


# architecture -> (module, class); imported lazily so that the registry costs nothing to import
_ARCHITECTURES: dict[str, tuple[str, str]] = {
    "LlamaForCausalLM": ("tgi.core.models.llama", "LlamaForCausalLM"),
    "MistralForCausalLM": ("tgi.core.models.llama", "MistralForCausalLM"),
    "Qwen2ForCausalLM": ("tgi.core.models.llama", "Qwen2ForCausalLM"),
    "Qwen3ForCausalLM": ("tgi.core.models.llama", "Qwen3ForCausalLM"),
    "GemmaForCausalLM": ("tgi.core.models.gemma", "GemmaForCausalLM"),
    "Gemma2ForCausalLM": ("tgi.core.models.gemma", "Gemma2ForCausalLM"),
    "Gemma3ForCausalLM": ("tgi.core.models.gemma3", "Gemma3ForCausalLM"),
    "Phi3ForCausalLM": ("tgi.core.models.phi3", "Phi3ForCausalLM"),
    "Starcoder2ForCausalLM": ("tgi.core.models.starcoder2", "Starcoder2ForCausalLM"),
    "FalconForCausalLM": ("tgi.core.models.falcon", "FalconForCausalLM"),
    "MixtralForCausalLM": ("tgi.core.models.mixtral", "MixtralForCausalLM"),
    "Qwen2MoeForCausalLM": ("tgi.core.models.mixtral", "Qwen2MoeForCausalLM"),
    "Qwen3MoeForCausalLM": ("tgi.core.models.mixtral", "Qwen3MoeForCausalLM"),
    "LlavaForConditionalGeneration": ("tgi.core.models.llava", "LlavaForConditionalGeneration"),
    "LlavaNextForConditionalGeneration": ("tgi.core.models.llava_next", "LlavaNextForConditionalGeneration"),
    "Qwen2VLForConditionalGeneration": ("tgi.core.models.qwen2_vl", "Qwen2VLForConditionalGeneration"),
    "Qwen2_5_VLForConditionalGeneration": ("tgi.core.models.qwen2_vl", "Qwen2_5_VLForConditionalGeneration"),
    "Idefics3ForConditionalGeneration": ("tgi.core.models.idefics3", "Idefics3ForConditionalGeneration"),
    "Gemma3ForConditionalGeneration": ("tgi.core.models.gemma3_vl", "Gemma3ForConditionalGeneration"),
    # pooling only (`tgi.core.loading.pooling_config`): an encoder, and decoders saved without their head
    "BertModel": ("tgi.core.models.bert", "BertEncoder"),
    "BertForSequenceClassification": ("tgi.core.models.bert", "BertClassifier"),
    "BertForMaskedLM": ("tgi.core.models.bert_sparse", "BertSparseEncoder"),  # SPLADE only
    "XLMRobertaModel": ("tgi.core.models.bert", "XLMRobertaEncoder"),
    "XLMRobertaForSequenceClassification": ("tgi.core.models.bert", "XLMRobertaClassifier"),
    "RobertaModel": ("tgi.core.models.bert", "RobertaEncoder"),
    "RobertaForSequenceClassification": ("tgi.core.models.bert", "RobertaClassifier"),
    "LlamaModel": ("tgi.core.models.embedders", "LlamaEmbedder"),
    "Qwen2Model": ("tgi.core.models.embedders", "Qwen2Embedder"),
    "Qwen3Model": ("tgi.core.models.embedders", "Qwen3Embedder"),
}
_MODEL_TYPES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "starcoder2": "Starcoder2ForCausalLM",
    "falcon": "FalconForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "llava": "LlavaForConditionalGeneration",
    "llava_next": "LlavaNextForConditionalGeneration",
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "idefics3": "Idefics3ForConditionalGeneration",
    "gemma3": "Gemma3ForConditionalGeneration",
}


def supported_architectures() -> list[str]:
    return list(_ARCHITECTURES)


def architecture_of(config: Any) -> str:
    """The supported architecture name of `config`; raises `UnsupportedModelError` otherwise."""
    archs = list(getattr(config, "architectures", None) or [])
    for arch in archs:
        if arch in _ARCHITECTURES:
            return arch
    model_type = getattr(config, "model_type", None)
    if not archs and model_type in _MODEL_TYPES:
        return _MODEL_TYPES[model_type]
    name = archs[0] if archs else f"model_type '{model_type}'"
    raise UnsupportedModelError(
        f"unsupported model architecture {name} (supported: {', '.join(_ARCHITECTURES)})"
    )


#: a pooling model's class in place of a causal LM's: the same layers, reading tensors named with or without
#: `model.` (embedders such as Qwen3-Embedding ship their causal LM's config with a base model's tensors)
_EMBEDDERS = {
    "LlamaForCausalLM": "LlamaEmbedder",
    "Qwen2ForCausalLM": "Qwen2Embedder",
    "Qwen3ForCausalLM": "Qwen3Embedder",
}


def model_class_for(config: Any, pooling: bool = False) -> type:
    """The model class for a transformers config: the native one (by `architectures[0]`, else
    `model_type`), else the transformers fallback (`TransformersCausalLM`) where it can run the model;
    raises `UnsupportedModelError` saying why neither can. `pooling`: the class that serves it as a pooling
    model, where it differs (`_EMBEDDERS`)."""
    if pooling:
        cls = model_class_for(config)
        name = _EMBEDDERS.get(getattr(cls, "architecture", ""))
        return cls if name is None else getattr(importlib.import_module("tgi.core.models.embedders"), name)
    try:
        module, cls = _ARCHITECTURES[architecture_of(config)]
    except UnsupportedModelError:
        from tgi.core.models.transformers_fallback import TransformersCausalLM, fallback_class

        try:
            fallback_class(config)
        except UnsupportedModelError as exc:
            raise UnsupportedModelError(f"{exc} (native: {', '.join(_ARCHITECTURES)})") from None
        return TransformersCausalLM
    return getattr(importlib.import_module(module), cls)


def model_path(config: Any) -> str:
    """ "native" or "transformers" (the fallback): which implementation runs `config`."""
    return (
        "native"
        if model_class_for(config).__module__ != "tgi.core.models.transformers_fallback"
        else "transformers"
    )


def attention_layer_specs(config: Any, tp_size: int = 1) -> list[AttentionLayerSpec]:
    """The attention of every layer (per rank), so the engine can `AttentionBackend.check` before loading."""
    return model_class_for(config).attention_layer_specs(config, tp_size)


def kv_cache_spec(config: Any, block_size: int, dtype: str, tp_size: int = 1) -> KVCacheSpec:
    """The KV cache the model needs (per rank)."""
    from tgi.core.interfaces.types import KVCacheSpec

    specs = attention_layer_specs(config, tp_size)
    return KVCacheSpec(
        num_layers=len(specs),
        num_kv_heads=specs[0].num_kv_heads,
        head_dim=specs[0].head_dim,
        block_size=block_size,
        dtype=dtype,
    )
