"""A pipeline stage's model holds only its layers' parameters (the embedding on the first stage, the final
norm and head on the last, the embedding again as the tied head); models outside the Llama family are refused
by name."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from tgi.core.config import ConfigError
from tgi.core.models.gemma import GemmaForCausalLM
from tgi.core.models.llama import LlamaForCausalLM, Qwen2ForCausalLM
from tgi.core.parallel.pipeline_model import build_stage_model, check_pipeline_model, stage_selector
from tgi.core.parallel.stage_split import pipeline_stage


def config(tied: bool) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=tied,
    )  # fmt: skip


def holds(model) -> set[str]:
    names = {name.split(".weight")[0] for name, _ in model.named_parameters()}
    return {n.rsplit(".", 2)[0] if n.startswith("model.layers.") else n for n in names}


def test_each_stage_materialises_only_its_own_modules():
    first, last = (
        build_stage_model(
            LlamaForCausalLM, config(False), pipeline_stage(r, 3, 2), torch.float32, "cpu", None
        )
        for r in range(2)
    )
    assert {n for n in holds(first) if n.startswith("model.layers.")} == {"model.layers.0", "model.layers.1"}
    assert "model.embed_tokens" in holds(first) and "lm_head" not in holds(first)
    assert {n for n in holds(last) if n.startswith("model.layers.")} == {"model.layers.2"}
    assert {"model.norm", "lm_head"} <= holds(last) and "model.embed_tokens" not in holds(last)
    assert all(p.device.type == "cpu" for p in last.parameters())
    with pytest.raises(RuntimeError, match="another pipeline stage"):
        last.model.layers[0](torch.zeros(1, 32))


def test_the_tied_last_stage_keeps_the_embedding_table_as_its_head():
    stage = pipeline_stage(1, 3, 2, tied_embeddings=True)
    model = build_stage_model(LlamaForCausalLM, config(True), stage, torch.float32, "cpu", None)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    select = stage_selector(stage, None)
    assert (
        select("model.embed_tokens.weight") is True and select("model.layers.0.mlp.up_proj.weight") is False
    )


def test_models_outside_the_llama_family_are_refused_by_name():
    check_pipeline_model(Qwen2ForCausalLM, config(False), 2)
    with pytest.raises(ConfigError, match="--pipeline-parallel-size 2: GemmaForCausalLM is not split"):
        check_pipeline_model(GemmaForCausalLM, config(False), 2)
    with pytest.raises(ConfigError, match="3 decoder layers, fewer than the stages"):
        check_pipeline_model(LlamaForCausalLM, config(False), 4)
    quantized = config(False)
    quantized.quantization_config = {"quant_method": "gptq"}
    with pytest.raises(ConfigError, match="quantized checkpoint"):
        check_pipeline_model(LlamaForCausalLM, quantized, 2)
