"""A SPLADE sparse embedder through the engine against sentence-transformers, in float32: a random-weight
BERT masked LM saved by `SparseEncoder` in the test (a fill-mask `Transformer`, `SpladePooling`; the older
`MLMTransformer` too), its prompts of
different lengths batched in one step, each equal to `SparseEncoder.encode`'s weights (max abs diff < 1e-4,
the same non-zero entries); and the folders it refuses, by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.embedding_models import WORDS, reference_sparse_embeddings, save_splade

from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams

TEXTS = ["w1 w2 w3", "w5", " ".join(WORDS[4:40]), "w7 w8 w9 w10 w11 w12 w13"]


def _engine(folder) -> LLMEngine:
    return LLMEngine.from_config(
        EngineConfig(model_id=str(folder), dtype="float32", max_batch_total_tokens=2048)
    )


@pytest.mark.parametrize("older", [False, True])
def test_engine_equals_sparse_encoder(tmp_path, older):
    folder = save_splade(tmp_path / "st", older=older)
    engine = _engine(folder)
    spec = engine.model_info.pooling
    assert (spec.kind, spec.mode, spec.normalize, spec.dimension) == ("sparse", "max", False, len(WORDS))
    params = SamplingParams(max_new_tokens=1)
    ids = [
        engine.add_validated_request(engine.validate(engine.tokenizer.encode(t), params, pooling=True))
        for t in TEXTS
    ]
    vectors, steps = {}, 0
    while engine.has_unfinished():
        steps += 1
        vectors.update({e.request_id: e.embedding for e in engine.step()})
    assert steps < len(TEXTS)  # batched: several prompts shared a step
    got = np.array([vectors[i] for i in ids], dtype=np.float32)
    want = reference_sparse_embeddings(folder, TEXTS)
    assert got.shape == want.shape and np.abs(got - want).max() < 1e-4
    assert ((got > 0) == (want > 0)).all() and (got == 0).any() and (got > 0).any()  # sparse, both


def test_token_embeddings_and_generation_are_refused(tmp_path):
    from tgi.core.request import ValidationError

    engine = _engine(save_splade(tmp_path / "st"))
    params = SamplingParams(max_new_tokens=1)
    with pytest.raises(ValidationError, match="sparse embeddings"):
        engine.validate([2, 5, 3], params, pooling=True, token_embeddings=True)
    with pytest.raises(ValidationError, match="sparse embeddings"):
        engine.validate([2, 5, 3], SamplingParams(max_new_tokens=2))


@pytest.mark.parametrize(
    ("where", "change", "named"),
    [
        ("1_SpladePooling/config.json", {"pooling_strategy": "sum"}, "pooling_strategy"),
        ("1_SpladePooling/config.json", {"activation_function": "log1p_relu"}, "activation_function"),
        ("config_sentence_transformers.json", {"max_active_dims": 8}, "max_active_dims"),
    ],
)
def test_what_is_not_served_is_refused_at_start(tmp_path, where, change, named):
    folder = save_splade(tmp_path / "st")
    path = folder / where
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(ConfigError, match=named):
        _engine(folder)


def test_a_masked_lm_without_sparse_modules_is_refused(tmp_path):
    folder = save_splade(tmp_path / "st")
    (folder / "modules.json").unlink()
    with pytest.raises(ConfigError, match="SparseEncoder"):
        _engine(folder)
