"""Tensor parallelism without processes: refusals with the reason, and each rank's share of the weights."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from tgi.core.config import ConfigError, EngineConfig
from tgi.core.interfaces.collective import SingleProcessCollective
from tgi.core.loading import iter_weights, load_config, resolve_model
from tgi.core.models.registry import attention_layer_specs, model_class_for
from tgi.core.parallel.layers import ParallelLinearFactory, check_tensor_parallel, weight_selector
from tgi.core.testing.tiny_models import save_random_model


class RankOf(SingleProcessCollective):
    """Rank `rank` of `world_size`, for building and loading a shard (no communication happens)."""

    def __init__(self, rank: int, world_size: int) -> None:
        self._r, self._n = rank, world_size

    @property
    def rank(self) -> int:
        return self._r

    @property
    def world_size(self) -> int:
        return self._n


def test_default_model_heads_refused_for_two_shards():
    config = load_config(resolve_model(None))
    assert (config.num_attention_heads, config.num_key_value_heads) == (9, 3)
    with pytest.raises(ConfigError, match=r"9 attention heads are not divisible by 2 shards"):
        check_tensor_parallel(config, 2)
    check_tensor_parallel(config, 3)  # 3 query heads and 1 key/value head per rank
    assert {(s.num_heads, s.num_kv_heads) for s in attention_layer_specs(config, 3)} == {(3, 1)}


def test_engine_refuses_before_spawning_anything():
    import multiprocessing

    from tgi.core.engine import LLMEngine

    with pytest.raises(ConfigError, match=r"--num-shard 2: 9 attention heads are not divisible by 2 shards"):
        LLMEngine.from_config(EngineConfig(num_shard=2))
    assert not multiprocessing.active_children()


@pytest.mark.parametrize(
    ("heads", "kv_heads", "inter", "tp", "message"),
    [
        (12, 3, 64, 4, r"3 key/value heads can neither be split over nor replicated on 4 shards"),
        (8, 8, 100, 8, r"intermediate size 100 is not divisible by 8 shards"),
        (6, 6, 64, 4, r"6 attention heads are not divisible by 4 shards"),
    ],
)
def test_indivisible_shapes_refused(heads, kv_heads, inter, tp, message):
    config = LlamaConfig(
        hidden_size=96, num_attention_heads=heads, num_key_value_heads=kv_heads, intermediate_size=inter
    )
    with pytest.raises(ConfigError, match=message):
        check_tensor_parallel(config, tp)


def test_kv_heads_replicated_when_fewer_than_shards():
    config = LlamaConfig(hidden_size=64, num_attention_heads=8, num_key_value_heads=2, intermediate_size=128)
    check_tensor_parallel(config, 4)
    assert {(s.num_heads, s.num_kv_heads) for s in attention_layer_specs(config, 4)} == {(2, 1)}


@pytest.mark.parametrize("tp", [2, 4])
def test_each_rank_reads_and_holds_its_slices(tmp_path, tp):
    """Every rank reads about 1/N of the checkpoint (its slices, not whole tensors) and holds about 1/N of
    the parameters; the shards put together are the checkpoint (key/value heads replicated at N=4)."""
    folder = save_random_model(tmp_path, "llama", vocab_size=250, num_kv_heads=2)
    source = resolve_model(str(folder))
    config = load_config(source)
    cls = model_class_for(config)
    full = dict(iter_weights(source, config))
    full_bytes = sum(t.numel() for t in full.values())
    shards = []
    for rank in range(tp):
        model = cls(config, linear=ParallelLinearFactory.for_config(RankOf(rank, tp), config))
        read = list(iter_weights(source, config, select=weight_selector(model)))
        read_bytes = sum(t.numel() for _, t in read)
        model.load_weights(read)
        held = model.num_parameters()
        replicated = sum(p.numel() for n, p in model.named_parameters() if "norm" in n)
        kv = 2 * 8 * 64 * config.num_hidden_layers  # k and v rows of one head, all layers (replicated at N=4)
        slack = replicated + (kv if tp > 2 else 0) + 2 * 64 * tp  # + vocabulary padding rows
        assert read_bytes <= full_bytes / tp + slack, (rank, read_bytes, full_bytes)
        assert held <= full_bytes / tp + slack
        shards.append(dict(model.named_parameters()))
    layer, q_rows = "model.layers.1", 64 // tp  # per rank: 8/N query heads of 8 dims, 1 key/value head
    q = torch.cat([s[f"{layer}.self_attn.qkv_proj.weight"][:q_rows] for s in shards])
    torch.testing.assert_close(q, full[f"{layer}.self_attn.q_proj.weight"], rtol=0, atol=0)
    owners = shards[:: tp // 2]  # N=4: ranks 0,1 share key/value head 0, ranks 2,3 head 1
    k = torch.cat([s[f"{layer}.self_attn.qkv_proj.weight"][q_rows : q_rows + 8] for s in owners])
    torch.testing.assert_close(k, full[f"{layer}.self_attn.k_proj.weight"], rtol=0, atol=0)
    o = torch.cat([s[f"{layer}.self_attn.o_proj.weight"] for s in shards], dim=1)
    torch.testing.assert_close(o, full[f"{layer}.self_attn.o_proj.weight"], rtol=0, atol=0)
    emb = torch.cat([s["model.embed_tokens.weight"] for s in shards])
    torch.testing.assert_close(emb[:250], full["model.embed_tokens.weight"], rtol=0, atol=0)
    assert not emb[250:].any()  # padding rows (250 is not a multiple of 4)
