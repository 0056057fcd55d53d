"""Tensor parallelism of the native models beyond the Llama family, over processes (gloo on the CPU): two
ranks give one rank's greedy tokens and, within 1e-4, its logprobs of every vocabulary entry at every
step; shapes that cannot be split are refused with the reason before anything starts."""

from __future__ import annotations

import multiprocessing
from functools import cache

import pytest
import torch
import transformers

from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.parallel.layers import check_tensor_parallel
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.tiny_models import save_random_checkpoint

VOCAB = 250  # not a multiple of 4: the vocabulary-parallel layers pad it
ATOL = 1e-4
PROMPTS = [[5, 17, 33, 2, 90, 41, 7, 8, 120, 3, 77, 61], [9, 4, 200]]
SMALL = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0, eos_token_id=1, pad_token_id=0,
)  # fmt: skip

CONFIGS = {
    # soft-caps, sliding window on alternate layers, (1 + w) norms, tied head
    "gemma2": lambda: transformers.Gemma2Config(
        **SMALL, head_dim=16, attn_logit_softcapping=20.0, final_logit_softcapping=10.0, sliding_window=6
    ),
    # per-head q/k norms on each rank's heads, a rope per layer type
    "gemma3": lambda: transformers.Gemma3TextConfig(
        **SMALL, head_dim=16, sliding_window=6, layer_types=["sliding_attention", "full_attention"]
    ),
    # q/k/v and gate/up fused in the checkpoint, split into the ranks' parts
    "phi3": lambda: transformers.Phi3Config(**SMALL),
    # one key/value head (replicated on both ranks), parallel attention + MLP: two all-reduces
    "falcon-7b": lambda: transformers.FalconConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        multi_query=True,
        bos_token_id=0,
        eos_token_id=1,
    ),
    # every expert's intermediate dim split over the ranks, the router replicated
    "mixtral": lambda: transformers.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2),
    # per-head q/k norms on each rank's heads, experts split
    "qwen3-moe": lambda: transformers.Qwen3MoeConfig(
        **SMALL, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32
    ),
    # layer norms, biases everywhere (a row-parallel layer's bias added once, after the all-reduce)
    "starcoder2": lambda: transformers.Starcoder2Config(**SMALL, use_bias=True),
}


@cache
def _folder(name: str, root: str) -> str:
    return str(save_random_checkpoint(f"{root}/{name}", CONFIGS[name](), init_std=0.08))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("tp-native"))
    return lambda name: _folder(name, root)


def generate(folder: str, num_shard: int):
    """Greedy tokens and every step's logprobs of the whole vocabulary (12-token prompt in chunks of 8)."""
    config = EngineConfig(
        model_id=folder, num_shard=num_shard, dtype="float32", max_batch_total_tokens=1024,
        max_total_tokens=256, max_batch_prefill_tokens=8, max_num_seqs=4,
    )  # fmt: skip
    engine = LLMEngine.from_config(config)
    try:
        params = SamplingParams(max_new_tokens=4, ignore_eos=True, top_n_tokens=VOCAB)
        results = engine.generate(PROMPTS, params)
    finally:
        engine.runner.shutdown()
    rows = []
    for r in results:
        for event in r.events:
            row = torch.full((VOCAB,), float("nan"))
            for top in event.top_tokens:
                row[top.id] = top.logprob
            rows.append(row)
    return [r.token_ids for r in results], torch.stack(rows)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_two_ranks_match_one(folders, name):
    folder = folders(name)
    ref_tokens, ref_steps = generate(folder, 1)
    tokens, steps = generate(folder, 2)
    assert tokens == ref_tokens
    assert not steps.isnan().any()
    diff = (steps - ref_steps).abs().max().item()
    print(f"{name} N=2: max |logprob difference| vs N=1: {diff:.2e}")
    assert diff < ATOL
    assert not multiprocessing.active_children()


@pytest.mark.parametrize(
    ("config", "tp", "message"),
    [
        (
            transformers.MixtralConfig(**{**SMALL, "intermediate_size": 90}, num_local_experts=4),
            4,
            r"the experts' intermediate size 90 is not divisible by 4 shards",
        ),
        (
            transformers.FalconConfig(
                hidden_size=96, num_attention_heads=6, new_decoder_architecture=True, num_kv_heads=3
            ),
            2,
            r"3 key/value heads can neither be split over nor replicated on 2 shards",
        ),
        (
            transformers.FalconConfig(hidden_size=64, num_attention_heads=4, ffn_hidden_size=102),
            4,
            r"the MLP's intermediate size 102 is not divisible by 4 shards",
        ),
        (
            transformers.Qwen2MoeConfig(
                **SMALL, moe_intermediate_size=32, shared_expert_intermediate_size=34
            ),
            8,
            r"4 attention heads are not divisible by 8 shards",
        ),
        (
            transformers.Qwen2MoeConfig(
                **SMALL, moe_intermediate_size=32, shared_expert_intermediate_size=34
            ),
            4,
            r"the shared expert's intermediate size 34 is not divisible by 4 shards",
        ),
    ],
)
def test_indivisible_shapes_refused(config, tp, message):
    with pytest.raises(ConfigError, match=message):
        check_tensor_parallel(config, tp)
