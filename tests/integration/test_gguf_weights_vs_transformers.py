"""The default model's own quantized tensors (the Q8_0 token table, the Q4_1 projections of all 30 blocks, the
F32 norms) dequantize to exactly transformers' weights, Q/K permutation undone, with the same head counts
and the tied head: tgi's GGUF loader against transformers' reading of the same file (`hf_model`, conftest.py,
converted once per machine)."""

from __future__ import annotations

import pytest
import torch
from tiny_checkpoints import assert_same_weights

from tgi.core.loading import iter_weights, load_config, resolve_model

pytestmark = pytest.mark.slow


def test_gguf_weights_equal_transformers(hf_model):
    source = resolve_model(None)
    config = load_config(source)
    got = dict(iter_weights(source, config))
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in got.values())
    assert_same_weights(got, hf_model)  # exact equality, every tensor of every block
    assert torch.equal(hf_model.state_dict()["lm_head.weight"], got["model.embed_tokens.weight"])
    for field in ("num_attention_heads", "num_key_value_heads", "vocab_size", "tie_word_embeddings"):
        assert getattr(config, field) == getattr(hf_model.config, field)
