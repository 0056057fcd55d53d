"""Core's Llama-family models against transformers' own implementations, on small random-weight models
(the schedule: see tests/helpers/model_parity.py).

Tolerance: float32, max abs difference on logits <= 1e-4 (logits have magnitude ~1-10 with these weights).
"""

from __future__ import annotations

import pytest
import torch
import transformers
from model_parity import ATOL, SMALL, hf_model, run_and_compare

from tgi.core.models import (
    UnsupportedModelError,
    attention_layer_specs,
    kv_cache_spec,
    model_class_for,
)


def llama3_config():
    rope = {
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    return transformers.LlamaConfig(**SMALL, rope_scaling=rope, tie_word_embeddings=False)


def llama_linear_tied_config():  # SmolLM2-like: GQA + tied embeddings, here with linear rope scaling
    rope = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}
    return transformers.LlamaConfig(**SMALL, rope_scaling=rope, tie_word_embeddings=True)


def mistral_config():
    return transformers.MistralConfig(**SMALL, sliding_window=8, tie_word_embeddings=False)


def qwen2_config():
    return transformers.Qwen2Config(**SMALL, tie_word_embeddings=True)


def qwen2_sliding_config():  # sliding window on layers >= max_window_layers only
    return transformers.Qwen2Config(
        **SMALL, use_sliding_window=True, sliding_window=5, max_window_layers=1, tie_word_embeddings=False
    )


CONFIGS = {
    "llama3-rope": llama3_config,
    "llama-linear-tied": llama_linear_tied_config,
    "mistral-window8": mistral_config,
    "qwen2-bias": qwen2_config,
    "qwen2-sliding": qwen2_sliding_config,
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_transformers_float32(name):
    diff = run_and_compare(CONFIGS[name]())
    print(f"{name}: max |logit diff| = {diff:.2e}")
    assert diff <= ATOL


def test_bfloat16_close_to_float32_reference():
    # bf16 weights and activations against transformers in float32: a loose check that dtype casts work
    diff = run_and_compare(llama3_config(), dtype=torch.bfloat16)
    print(f"llama3-rope bf16: max |logit diff| = {diff:.2e}")
    assert diff < 0.25


def test_sliding_window_per_layer():
    specs = attention_layer_specs(qwen2_sliding_config())
    assert [s.sliding_window for s in specs] == [None, 5]
    assert [s.sliding_window for s in attention_layer_specs(qwen2_config())] == [None, None]
    assert [s.sliding_window for s in attention_layer_specs(mistral_config())] == [8, 8]
    spec = specs[0]
    assert (spec.num_heads, spec.num_kv_heads, spec.head_dim) == (4, 2, 16)


def test_kv_cache_spec():
    spec = kv_cache_spec(llama3_config(), 16, "bfloat16")
    assert (spec.num_layers, spec.num_kv_heads, spec.head_dim, spec.block_size) == (2, 2, 16, 16)


def test_unsupported_architecture():
    # no native model, and the transformers fallback cannot page Bloom's attention (GPT-2 it can: see
    # test_transformers_fallback.py)
    config = transformers.BloomConfig(architectures=["BloomForCausalLM"])
    with pytest.raises(UnsupportedModelError) as e:
        model_class_for(config)
    assert "BloomForCausalLM" in str(e.value)
    assert "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM" in str(e.value)


def test_load_weights_ties_missing_lm_head_and_reports_missing():
    config = llama3_config()  # not tied in the config
    hf = hf_model(config)
    state = {k: v for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    ours = model_class_for(config)(config)
    ours.load_weights(state.items())
    assert ours.lm_head.weight is ours.model.embed_tokens.weight

    state.pop("model.layers.1.self_attn.k_proj.weight")
    with pytest.raises(ValueError, match=r"model\.layers\.1\.self_attn\.qkv_proj\.weight:k"):
        model_class_for(config)(config).load_weights(state.items())
    with pytest.raises(ValueError, match=r"unexpected weight 'foo\.weight'"):
        model_class_for(config)(config).load_weights([("foo.weight", torch.zeros(1))])
