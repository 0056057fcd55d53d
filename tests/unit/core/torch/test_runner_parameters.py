"""`ModelInfo.num_parameters` counts the weights a quantized kernel keeps (the dense copy dropped to the
meta device) once: the default model's head, tied to its embeddings, is computed on its GGUF blocks for
every row count in `--deterministic` mode (its dense weight dropped) and still counted with the embeddings
alone, as when the blocks take only small inputs and the dense weight stays."""

from __future__ import annotations

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine

LIMITS = dict(max_total_tokens=64, max_batch_total_tokens=256, max_batch_prefill_tokens=64, max_num_seqs=2)


def test_a_tied_head_without_its_dense_weight_is_counted_once():
    kept = LLMEngine.from_config(EngineConfig(dtype="float32", **LIMITS))
    dropped = LLMEngine.from_config(EngineConfig(dtype="float32", deterministic=True, **LIMITS))
    head = dropped.runner.model.lm_head
    assert dropped.runner.model.tie_word_embeddings and head.weight.is_meta  # computed on the blocks alone
    assert not kept.runner.model.lm_head.weight.is_meta
    assert dropped.model_info.num_parameters == kept.model_info.num_parameters
    assert 134e6 < kept.model_info.num_parameters < 136e6  # SmolLM2-135M
