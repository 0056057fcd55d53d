"""Core's torch model definitions, written against the abstract attention interface.

`model_class_for(config)` picks the class: a native one (Llama, Mistral, Qwen2/3, Gemma 1/2, Phi-3, StarCoder2,
Falcon, Mixtral, Qwen2/3-MoE, LLaVA), else the transformers fallback (`transformers_fallback.TransformersCausalLM`)
where it can run the model; models take an `AttentionContext` (attention backend, KV cache,
step metadata) in `forward`, and Hugging Face-named weights in `load_weights`. Torch is imported only when
a model module is.
"""

from tgi.core.models.registry import (
    UnsupportedModelError,
    architecture_of,
    attention_layer_specs,
    kv_cache_spec,
    model_class_for,
    supported_architectures,
)

__all__ = [
    "UnsupportedModelError",
    "architecture_of",
    "attention_layer_specs",
    "kv_cache_spec",
    "model_class_for",
    "supported_architectures",
]
