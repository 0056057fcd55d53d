"""Classifiers through the engine, in float32: a random-weight BERT cross-encoder saved by sentence-transformers'
`CrossEncoder` in the test, its pairs of different lengths batched in one step, whose logits through the
model's activation equal `CrossEncoder.predict` (within 1e-4, same order); a three-label classifier saved by
transformers alone whose logits equal `BertForSequenceClassification`'s."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.embedding_models import save_classifier

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams

PAIRS = [("w1 w2", "w3 w4 w5"), ("w5", "w6 w7"), ("w9 w9 w9", "w1"), ("w40 w41", "w1 w2 w3 w4 w5 w6 w7 w8")]


def logits(engine: LLMEngine, encodings: list[list[int]]) -> np.ndarray:
    """Every prompt's pooled output (the head's logits), all queued at once."""
    ids = [engine.add_validated_request(
        engine.validate(x, SamplingParams(max_new_tokens=1), pooling=True)
    ) for x in encodings]  # fmt: skip
    out, steps = {}, 0
    while engine.has_unfinished():
        steps += 1
        for event in engine.step():
            out[event.request_id] = np.array(event.embedding, dtype=np.float64)
    assert steps < len(encodings)  # batched
    return np.stack([out[i] for i in ids])


def test_cross_encoder_equals_sentence_transformers(tmp_path):
    from sentence_transformers import CrossEncoder

    folder = save_classifier(tmp_path / "ce", num_labels=1)
    engine = LLMEngine.from_config(EngineConfig(model_id=str(folder), dtype="float32"))
    spec = engine.model_info.pooling
    assert (spec.kind, spec.labels, spec.activation, spec.dimension) == (
        "classify",
        ("label_0",),
        "sigmoid",
        1,
    )
    got = 1 / (1 + np.exp(-logits(engine, [engine.tokenizer(a, b)["input_ids"] for a, b in PAIRS])[:, 0]))
    want = CrossEncoder(str(folder), device="cpu").predict(PAIRS)
    assert np.abs(got - want).max() < 1e-4
    assert list(np.argsort(-got)) == list(np.argsort(-want))
    assert np.diff(np.sort(want)).min() > 1e-3  # the order is no near-tie


def test_three_labels_equal_transformers(tmp_path):
    import torch
    from transformers import AutoModelForSequenceClassification

    folder = save_classifier(tmp_path / "cls", num_labels=3, cross_encoder=False)
    engine = LLMEngine.from_config(EngineConfig(model_id=str(folder), dtype="float32"))
    spec = engine.model_info.pooling
    assert (spec.labels, spec.activation, spec.source) == (
        ("label_0", "label_1", "label_2"),
        "identity",
        "config.json",
    )
    texts = ["w1 w2 w3", "w5", "w7 w8 w9 w10"]
    got = logits(engine, [engine.tokenizer(t)["input_ids"] for t in texts])
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        want = torch.cat([model(**engine.tokenizer(t, return_tensors="pt")).logits for t in texts]).numpy()
    assert np.abs(got - want).max() < 1e-4


def test_generation_is_refused_on_a_classifier(tmp_path):
    from tgi.core.request import ValidationError

    engine = LLMEngine.from_config(
        EngineConfig(model_id=str(save_classifier(tmp_path / "ce")), dtype="float32")
    )
    with pytest.raises(ValidationError, match="serves scores"):
        engine.validate([4, 5], SamplingParams(max_new_tokens=2))


@pytest.mark.parametrize("kind", ["xlmr", "roberta"])
def test_xlm_roberta_cross_encoder_equals_sentence_transformers(tmp_path, kind):
    """An XLM-RoBERTa cross-encoder (bge-reranker-v2-m3's architecture): its pairs `<s> a </s></s> b </s>`
    of one token type, positions after the padding index in each padded row, scores equal to
    `CrossEncoder.predict`'s."""
    from sentence_transformers import CrossEncoder

    folder = save_classifier(tmp_path / "ce", num_labels=1, kind=kind)  # RoBERTa: stsb-roberta's
    engine = LLMEngine.from_config(EngineConfig(model_id=str(folder), dtype="float32"))
    spec = engine.model_info.pooling
    assert (spec.kind, spec.labels, spec.activation) == ("classify", ("label_0",), "sigmoid")
    encodings = [engine.tokenizer(a, b)["input_ids"] for a, b in PAIRS]
    pair = engine.tokenizer.convert_ids_to_tokens(encodings[1])
    assert pair == ["<s>", "w5", "</s>", "</s>", "w6", "w7", "</s>"]  # one token type: none asked
    got = 1 / (1 + np.exp(-logits(engine, encodings)[:, 0]))
    want = CrossEncoder(str(folder), device="cpu").predict(PAIRS)
    assert np.abs(got - want).max() < 1e-3
    assert list(np.argsort(-got)) == list(np.argsort(-want))
    assert np.diff(np.sort(want)).min() > 1e-3  # the order is no near-tie
