"""Native models beyond the Llama family (Qwen3, Gemma, Gemma 2, Gemma 3, Phi-3, StarCoder2, Falcon) against
transformers on small random-weight models: prefill, chunked-prefill and decode logits over a ragged paged
batch (tests/helpers/model_parity.py). Float32, max abs logit difference <= 1e-4."""

from __future__ import annotations

import pytest
import torch
import transformers
from model_parity import ATOL, SMALL, hf_model, load_ours, run_and_compare

from tgi.core.models import UnsupportedModelError, attention_layer_specs, model_class_for


def qwen3():  # q/k norms per head, an explicit head_dim unlike hidden / heads
    return transformers.Qwen3Config(**SMALL, head_dim=24, tie_word_embeddings=False)


def gemma():  # scaled embeddings, (1 + w) norms, GELU-tanh, head_dim 32 (hidden / heads would be 16)
    return transformers.GemmaConfig(**SMALL, head_dim=32)


def gemma2():  # + soft-caps (attention, final logits), query_pre_attn_scalar, sliding window on layer 0
    return transformers.Gemma2Config(
        **SMALL, head_dim=16, query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0, sliding_window=5,
    )  # fmt: skip


def gemma3(full_rope=None):  # + q/k norms, a rope of its own for sliding layers (local base 10k)
    rope = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": full_rope or {"rope_type": "default", "rope_theta": 1000000.0},
    }
    return transformers.Gemma3TextConfig(
        **{**SMALL, "num_hidden_layers": 3}, head_dim=16, query_pre_attn_scalar=24, sliding_window=5,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], rope_parameters=rope,
    )  # fmt: skip


def gemma3_linear():  # the larger checkpoints scale the global rope linearly (factor 8)
    return gemma3({"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0})


def phi3():  # fused qkv / gate_up in the checkpoint, sliding window
    return transformers.Phi3Config(**SMALL, pad_token_id=0, sliding_window=6, tie_word_embeddings=False)


def phi3_longrope():  # LongRoPE: the 24-token sequence runs past original_max_position_embeddings=16
    half = 8  # head_dim 16: 8 frequencies
    rope = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "short_factor": [1.0 + 0.1 * i for i in range(half)],
        "long_factor": [1.0 + 0.7 * i for i in range(half)],
        "original_max_position_embeddings": 16,
    }
    return transformers.Phi3Config(
        **SMALL,
        pad_token_id=0,
        rope_parameters=rope,
        original_max_position_embeddings=16,
        tie_word_embeddings=False,
    )


def phi3_partial():  # rotary on half of each head
    return transformers.Phi3Config(
        **SMALL, pad_token_id=0, partial_rotary_factor=0.5, tie_word_embeddings=False
    )


def starcoder2():  # layer norms with biases, biases everywhere, c_fc/c_proj GELU MLP, sliding window
    return transformers.Starcoder2Config(**SMALL, sliding_window=7, use_bias=True)


def _falcon(**kwargs):
    small = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4)
    return transformers.FalconConfig(**small, max_position_embeddings=128, **kwargs)


def falcon_7b():  # multi-query, attention and MLP in parallel from one norm, no biases
    return _falcon(multi_query=True, parallel_attn=True, new_decoder_architecture=False)


def falcon_40b():  # grouped key/value heads, two norms (ln_attn, ln_mlp), with biases
    return _falcon(new_decoder_architecture=True, num_kv_heads=2, bias=True)


def falcon_sequential():  # per-head interleaved q/k/v, sequential attention then MLP
    return _falcon(multi_query=False, parallel_attn=False, new_decoder_architecture=False, bias=True)


CONFIGS = {
    "qwen3": qwen3,
    "gemma": gemma,
    "gemma2": gemma2,
    "gemma3": gemma3,
    "gemma3-linear-rope": gemma3_linear,
    "phi3": phi3,
    "phi3-longrope": phi3_longrope,
    "phi3-partial-rotary": phi3_partial,
    "starcoder2": starcoder2,
    "falcon-7b": falcon_7b,
    "falcon-40b": falcon_40b,
    "falcon-sequential": falcon_sequential,
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_transformers_float32(name):
    diff = run_and_compare(CONFIGS[name]())
    print(f"{name}: max |logit diff| = {diff:.2e}")
    assert diff <= ATOL


def test_gemma2_layers_alternate_windows_and_soft_cap():
    specs = attention_layer_specs(gemma2())
    assert [s.sliding_window for s in specs] == [5, None]
    assert {s.softcap for s in specs} == {2.0}
    assert specs[0].scale == pytest.approx(24**-0.5)


def test_falcon_kv_heads():
    assert [s.num_kv_heads for s in attention_layer_specs(falcon_7b())] == [1, 1]
    assert attention_layer_specs(falcon_40b())[0].num_kv_heads == 2
    assert attention_layer_specs(falcon_sequential())[0].num_kv_heads == 4


def test_falcon_alibi_refused():
    config = _falcon(alibi=True)
    with pytest.raises(UnsupportedModelError, match="ALiBi"):
        attention_layer_specs(config)


def test_phi3_longrope_switches_as_transformers_generation_does():
    """A sequence crossing original_max_position_embeddings (16) while decoding: transformers' generation
    with a KV cache rotates each step's tokens with the factors of the length reached (short up to 16,
    long after) and keeps the cached keys; so do we, per sequence."""
    from tgi.backends.cpu.attention import CpuAttention
    from tgi.backends.cpu.kv_cache import CpuKVCache
    from tgi.core.models import kv_cache_spec
    from tgi.core.models.context import AttentionContext, SeqChunk, build_attention_metadata, build_positions

    config = phi3_longrope()
    hf = hf_model(config)
    ours = load_ours(config, hf)
    ids = torch.randint(0, config.vocab_size, (19,), generator=torch.Generator().manual_seed(3))
    cache, attn = CpuKVCache(kv_cache_spec(config, 4, "float32"), 5), CpuAttention()
    diffs = []
    with torch.no_grad():
        out = hf(ids[None, :14], use_cache=True)
        expected, past = [out.logits[0, -1]], out.past_key_values
        for n in range(14, 18):
            out = hf(ids[None, n : n + 1], past_key_values=past, use_cache=True)
            expected.append(out.logits[0, -1])
            past = out.past_key_values
        steps = [SeqChunk(0, 14, [0, 1, 2, 3], True)] + [
            SeqChunk(n, 1, [0, 1, 2, 3, 4], False) for n in range(14, 18)
        ]
        for chunk, want in zip(steps, expected, strict=True):
            meta = build_attention_metadata([chunk], 4)
            attn.prepare(meta)
            x = ids[chunk.start_pos : chunk.start_pos + chunk.num_tokens]
            hidden = ours(x, build_positions([chunk]), AttentionContext(attn, cache, meta))
            diffs.append((ours.compute_logits(hidden[-1:])[0] - want).abs().max().item())
    assert max(diffs) <= ATOL, diffs
    # and the switch matters: the long factors rotate differently
    pos = torch.arange(4)
    short = ours.rotary.cos_sin(pos, torch.float32, torch.full((4,), 16))
    long = ours.rotary.cos_sin(pos, torch.float32, torch.full((4,), 17))
    assert not torch.allclose(short[0], long[0])


def test_architectures_registered():
    """Chosen from `model_type` (configs made in code name no architecture) and from `architectures`."""
    for make in CONFIGS.values():
        config = make()
        cls = model_class_for(config)
        config.architectures = [cls.architecture]
        assert model_class_for(config) is cls


@pytest.mark.parametrize("name", ["gemma2", "phi3-longrope", "falcon-40b", "starcoder2"])
def test_bfloat16_close_to_float32_reference(name):
    # bf16 weights and activations against transformers in float32: a loose check that dtype casts work
    diff = run_and_compare(CONFIGS[name](), dtype=torch.bfloat16)
    print(f"{name} bf16: max |logit diff| = {diff:.2e}")
    assert diff < 0.25
