"""Core's torch model definitions, written against the abstract attention interface.

`model_class_for(config)` picks the class; models take an `AttentionContext` (attention backend, KV cache,
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
