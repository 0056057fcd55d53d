"""The transformers fallback (architectures with no native model): transformers' own GPT-2, OPT, GPT-NeoX,
GPT-BigCode and Cohere 2 modules, their attention routed to the CPU backend's paged attention through
transformers' attention interface, give transformers' logits within 1e-4 (float32) over a ragged paged
batch with chunked prefill (tests/helpers/model_parity.py); what it cannot run is refused with the reason."""

from __future__ import annotations

import pytest
import transformers
from model_parity import run_and_compare

from tgi.core.config import ConfigError
from tgi.core.models import UnsupportedModelError, model_class_for
from tgi.core.models.registry import model_path
from tgi.core.models.transformers_fallback import TransformersCausalLM
from tgi.core.parallel.layers import check_tensor_parallel

ATOL = 1e-4

CONFIGS = {
    # learned absolute positions, fused c_attn (Conv1D), tied head
    "gpt2": lambda: transformers.GPT2Config(vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4),
    # learned positions with an offset, pre-norm, biases
    "opt": lambda: transformers.OPTConfig(
        vocab_size=256,
        hidden_size=64,
        ffn_dim=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=128,
        word_embed_proj_dim=64,
        pad_token_id=1,
        bos_token_id=2,
        eos_token_id=2,
    ),
    # partial rotary, parallel residual
    "gpt-neox": lambda: transformers.GPTNeoXConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=128,
        rotary_pct=0.5,
    ),
    # multi-query attention (one key/value head)
    "gpt-bigcode": lambda: transformers.GPTBigCodeConfig(
        vocab_size=256, n_positions=128, n_embd=64, n_layer=2, n_head=4, multi_query=True
    ),
    # sliding-window layers between full ones (which have no rope at all), parallel attention and MLP
    "cohere2": lambda: transformers.Cohere2Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        sliding_window=5,
        layer_types=["sliding_attention", "full_attention"],
        pad_token_id=0,
        bos_token_id=0,
        eos_token_id=1,
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_fallback_logits_match_transformers_float32(name):
    config = CONFIGS[name]()
    assert model_class_for(config) is TransformersCausalLM and model_path(config) == "transformers"
    diff = run_and_compare(config)
    print(f"{name} (transformers fallback): max |logit diff| = {diff:.2e}")
    assert diff <= ATOL


def test_native_models_are_not_the_fallback():
    assert model_path(transformers.MistralConfig()) == "native"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (transformers.T5Config(), r"encoder-decoder"),
        (transformers.BloomConfig(), r"does not route its attention through the attention interface"),
        (transformers.MambaConfig(), r"layers of type linear_attention"),
        # an encoder without a native class is not run as the decoder transformers' LM head would make it
        (transformers.CamembertConfig(architectures=["CamembertModel"]), r"CamembertModel is an encoder"),
        (transformers.ElectraConfig(architectures=["ElectraModel"]), r"ElectraModel is an encoder"),
    ],
)
def test_what_the_fallback_cannot_run_is_refused(config, message):
    with pytest.raises(UnsupportedModelError, match=message) as e:
        model_class_for(config)
    assert "native: LlamaForCausalLM" in str(e.value)


def test_fallback_refuses_tensor_parallelism():
    with pytest.raises(ConfigError, match="the transformers fallback runs unsharded"):
        check_tensor_parallel(CONFIGS["gpt2"](), 2)


def test_kv_cache_sized_from_the_config_and_checked_against_the_model(monkeypatch):
    """GPT-BigCode's multi-query attention reads as one key/value head (its config says `multi_query`);
    a config read wrongly is refused at the first step, naming the shapes, instead of attending wrongly."""
    from tgi.core.models import kv_cache_spec

    config = CONFIGS["gpt-bigcode"]()
    assert kv_cache_spec(config, 4, "float32").num_kv_heads == 1
    monkeypatch.setattr(TransformersCausalLM, "num_kv_heads", classmethod(lambda cls, c: 4))
    with pytest.raises(UnsupportedModelError, match=r"attends with 1 key/value heads of 16 dims, .* 4 of 16"):
        run_and_compare(config)
