"""Every native architecture, and two served by the transformers fallback (GPT-2, OPT), through the real
engine on the CPU backend (float32): greedy tokens equal transformers' (`transformers_greedy`), for one
request alone and for three batched with chunked prefill under a KV budget small enough that requests are
preempted and recomputed."""

from __future__ import annotations

import pytest
import transformers

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import PROMPTS, VOCAB_SIZE, transformers_greedy
from tgi.core.testing.tiny_models import save_random_checkpoint

MAX_NEW_TOKENS = 8
SMALL = dict(
    vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0, eos_token_id=1, pad_token_id=0,
)  # fmt: skip
_FALCON = dict(
    vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, bos_token_id=0,
    eos_token_id=1, max_position_embeddings=256,
)  # fmt: skip

CONFIGS = {
    "qwen3": lambda: transformers.Qwen3Config(**SMALL, head_dim=24),
    "gemma": lambda: transformers.GemmaConfig(**SMALL, head_dim=32),
    "gemma2": lambda: transformers.Gemma2Config(
        **SMALL, head_dim=16, attn_logit_softcapping=20.0, final_logit_softcapping=10.0, sliding_window=6
    ),
    "gemma3": lambda: transformers.Gemma3TextConfig(
        **SMALL, head_dim=16, sliding_window=6, layer_types=["sliding_attention", "full_attention"]
    ),
    "phi3": lambda: transformers.Phi3Config(**SMALL, sliding_window=12),
    "starcoder2": lambda: transformers.Starcoder2Config(**SMALL, sliding_window=10),
    "falcon-7b": lambda: transformers.FalconConfig(**_FALCON, multi_query=True, parallel_attn=True),
    "falcon-40b": lambda: transformers.FalconConfig(**_FALCON, new_decoder_architecture=True, num_kv_heads=2),
    "mixtral": lambda: transformers.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2),
    "qwen2-moe": lambda: transformers.Qwen2MoeConfig(
        **SMALL,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=48,
    ),
    # the transformers fallback
    "gpt2 (fallback)": lambda: transformers.GPT2Config(
        vocab_size=VOCAB_SIZE, n_positions=256, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=1
    ),
    "opt (fallback)": lambda: transformers.OPTConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        ffn_dim=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=256,
        word_embed_proj_dim=64,
        pad_token_id=2,
        bos_token_id=0,
        eos_token_id=1,
    ),
    "qwen3-moe": lambda: transformers.Qwen3MoeConfig(
        **SMALL, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_tokens_equal_transformers_alone_and_preempted(tmp_path, name):
    folder = save_random_checkpoint(tmp_path / name, CONFIGS[name](), init_std=0.08)
    reference = transformers_greedy(folder, PROMPTS, MAX_NEW_TOKENS)
    # 64 tokens of KV: the longest request (45 + 8) fits alone, the three together (95) do not
    config = EngineConfig(
        model_id=str(folder), backend="cpu", dtype="float32", block_size=4, max_total_tokens=64,
        max_batch_total_tokens=64, max_batch_prefill_tokens=32, max_num_seqs=8,
    )  # fmt: skip
    engine = LLMEngine.from_config(config)
    # what the launch log prints after "weights loaded:": the architecture, and the fallback where it runs
    assert engine.model_info.architecture.endswith("(transformers fallback)") == name.endswith("(fallback)")
    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS, ignore_eos=True)
    alone = engine.generate([list(PROMPTS[0])], params)
    assert [r.token_ids for r in alone] == reference[:1]
    batched = engine.generate([list(p) for p in PROMPTS], params)
    assert engine.scheduler.num_preemptions > 0
    assert [r.token_ids for r in batched] == reference
