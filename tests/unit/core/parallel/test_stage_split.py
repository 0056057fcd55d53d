"""Pipeline stages: contiguous balanced layer ranges, a rank's stage and peers, which checkpoint tensors a
stage reads, and the settings refused with --pipeline-parallel-size > 1."""

from __future__ import annotations

import pytest

from tgi.core.config import ConfigError, EngineConfig
from tgi.core.parallel.stage_split import pipeline_stage, split_layers, stage_holds


def test_layers_split_in_contiguous_balanced_stages():
    assert split_layers(4, 2) == [range(0, 2), range(2, 4)]
    assert split_layers(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]  # the extra layers go first
    assert split_layers(3, 3) == [range(0, 1), range(1, 2), range(2, 3)]
    assert split_layers(5, 1) == [range(0, 5)]
    with pytest.raises(ValueError, match="fewer than 3 pipeline stages"):
        split_layers(2, 3)
    with pytest.raises(ValueError, match=">= 1"):
        split_layers(2, 0)


def test_rank_is_shard_of_its_stage_and_sends_to_the_same_shard():
    # 2 stages × 2 shards: ranks 0, 1 are stage 0; ranks 2, 3 stage 1
    stages = [pipeline_stage(r, num_layers=5, num_stages=2, tp_size=2) for r in range(4)]
    assert [(s.index, s.tp_rank) for s in stages] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [s.layers for s in stages] == [range(0, 3)] * 2 + [range(3, 5)] * 2
    assert stages[1].next_rank == 3 and stages[1].previous_rank is None
    assert stages[2].previous_rank == 0 and stages[2].next_rank is None
    assert stages[3].rank_of(1) == 3 and stages[2].rank_of(0) == 0
    assert stages[0].is_first and stages[0].holds_embedding and not stages[0].is_last
    assert stages[2].is_last and not stages[2].holds_embedding  # untied head: no embedding table
    with pytest.raises(ValueError, match="outside a group of 4"):
        pipeline_stage(4, 5, 2, 2)


def test_a_stage_reads_only_its_tensors_and_the_tied_last_stage_reads_the_embedding():
    first, last = (pipeline_stage(r, 4, 2) for r in range(2))
    tied_last = pipeline_stage(1, 4, 2, tied_embeddings=True)
    names = [
        "model.embed_tokens.weight", "model.layers.1.mlp.up_proj.weight", "model.layers.2.self_attn.q_proj.weight",
        "model.norm.weight", "lm_head.weight",
    ]  # fmt: skip
    assert [stage_holds(first, n) for n in names] == [True, True, False, False, False]
    assert [stage_holds(last, n) for n in names] == [False, False, True, True, True]
    assert stage_holds(tied_last, "model.embed_tokens.weight")
    assert not stage_holds(first, "model.layers.12.mlp.up_proj.weight")  # 12 is not 1


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ({"speculate": 2}, "--speculate"),
        ({"speculative_model": "draft"}, "--speculative-model"),
        ({"lora_adapters": (("a", "/x"),)}, "--lora-adapters"),
        ({"quantize": "fp8"}, "--quantize fp8"),
    ],
)
def test_features_that_do_not_cross_stages_are_refused_by_name(setting, named):
    with pytest.raises(ConfigError, match=f"--pipeline-parallel-size 2 with .*{named}"):
        EngineConfig(model_id="m", pipeline_parallel_size=2, **setting)
    EngineConfig(model_id="m", **setting)  # fine without stages


def test_the_group_is_shards_times_stages_over_the_nodes():
    config = EngineConfig(model_id="m", num_shard=2, pipeline_parallel_size=2, nnodes=2)
    assert config.world_size == 4
    with pytest.raises(ConfigError, match="does not split evenly over --nnodes 3"):
        EngineConfig(model_id="m", num_shard=1, pipeline_parallel_size=2, nnodes=3)
    with pytest.raises(ConfigError, match=">= 1"):
        EngineConfig(model_id="m", pipeline_parallel_size=0)
