"""Core's Llama-family models against transformers' own implementations, on small random-weight models.

The same weights (transformers' state_dict) go into both. Our model runs the paged CPU attention over a
ragged batch: step 1 prefills two whole prompts and the first chunk of a third; step 2 prefills that
prompt's second chunk while the other two decode; then every sequence decodes for a few steps. Every
logit row we produce is compared with transformers' forward over the whole sequence (prompt + the tokens
fed so far): attention is causal, so row p of the full forward is the logits after position p.

Tolerance: float32, max abs difference on logits <= 1e-4 (logits have magnitude ~1-10 with these weights).
"""

from __future__ import annotations

import pytest
import torch
import transformers

from tgi.backends.cpu.attention import CpuAttention
from tgi.backends.cpu.kv_cache import CpuKVCache
from tgi.core.models import (
    UnsupportedModelError,
    attention_layer_specs,
    kv_cache_spec,
    model_class_for,
)
from tgi.core.models.context import AttentionContext, SeqChunk, build_attention_metadata, build_positions

ATOL = 1e-4
BLOCK_SIZE = 4
PROMPT_LENS = (20, 13, 7)
SPLIT = 6  # the second prompt is prefilled as [0, 6) then [6, 13)
NUM_DECODES = 4

SMALL = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
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


def hf_model(config):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model.eval()
    with torch.no_grad():  # larger weights than the 0.02 init, so that differences show
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.1)
    return model


def run_and_compare(config, dtype=torch.float32) -> float:
    """Run the schedule on our model; return the max abs logit difference to transformers."""
    hf = hf_model(config)
    ours = model_class_for(config)(config, dtype=dtype)
    ours.load_weights(hf.state_dict().items())

    gen = torch.Generator().manual_seed(1)
    full = [torch.randint(0, config.vocab_size, (n + NUM_DECODES,), generator=gen) for n in PROMPT_LENS]
    with torch.no_grad():
        expected = [hf(ids[None]).logits[0].float() for ids in full]

    # per sequence: the (start, end, is_prefill) pieces fed at each step
    pieces = [
        [(0, 20, True)] + [(20 + i, 21 + i, False) for i in range(NUM_DECODES)],
        [(0, SPLIT, True), (SPLIT, 13, True)] + [(13 + i, 14 + i, False) for i in range(NUM_DECODES - 1)],
        [(0, 7, True)] + [(7 + i, 8 + i, False) for i in range(NUM_DECODES)],
    ]
    spec = kv_cache_spec(config, BLOCK_SIZE, str(dtype).removeprefix("torch."))
    blocks_per_seq = [(len(t) + BLOCK_SIZE - 1) // BLOCK_SIZE for t in full]
    perm = torch.randperm(sum(blocks_per_seq) + 2, generator=gen).tolist()
    tables, off = [], 0
    for n in blocks_per_seq:
        tables.append(perm[off : off + n])
        off += n
    cache = CpuKVCache(spec, len(perm))
    attn = CpuAttention()
    for layer in attention_layer_specs(config):
        attn.check(layer, BLOCK_SIZE, spec.dtype)

    max_diff = 0.0
    for step in range(max(len(p) for p in pieces)):
        work = [(i, *pieces[i][step]) for i in range(len(pieces)) if step < len(pieces[i])]
        work.sort(key=lambda w: not w[3])  # prefill chunks first
        chunks = [SeqChunk(a, b - a, tables[i], pf) for i, a, b, pf in work]
        meta = build_attention_metadata(chunks, BLOCK_SIZE)
        attn.prepare(meta)
        input_ids = torch.cat([full[i][a:b] for i, a, b, _ in work])
        with torch.no_grad():
            hidden = ours(input_ids, build_positions(chunks), AttentionContext(attn, cache, meta))
            logits = ours.compute_logits(hidden)
        assert logits.dtype == torch.float32 and logits.shape == (len(input_ids), config.vocab_size)
        ref = torch.cat([expected[i][a:b] for i, a, b, _ in work])
        max_diff = max(max_diff, (logits - ref).abs().max().item())
    return max_diff


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
    config = transformers.GPT2Config(architectures=["GPT2LMHeadModel"])
    with pytest.raises(UnsupportedModelError) as e:
        model_class_for(config)
    assert "GPT2LMHeadModel" in str(e.value)
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
