"""Pooling models through the engine against sentence-transformers, in float32: random-weight models saved
with sentence-transformers in the test (a BERT encoder with mean pooling + Normalize, a Qwen3-shaped decoder
with last-token pooling + Normalize, and the other modes), their prompts of different lengths batched in one
step by the scheduler, equal to sentence-transformers' own `encode` (cosine > 0.9999, max abs diff < 1e-3)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.embedding_models import (
    WORDS,
    reference_embeddings,
    reference_token_embeddings,
    save_embedder,
)

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams

TEXTS = ["w1 w2 w3", "w5", " ".join(WORDS[4:40]), "w7 w8 w9 w10 w11 w12 w13", "w100 w1 w100"]


def pooled(engine: LLMEngine, texts: list[str]) -> np.ndarray:
    """Every text pooled by the engine, all queued at once, normalized as the model's Normalize does."""
    ids = [engine.add_validated_request(
        engine.validate(engine.tokenizer.encode(t), SamplingParams(max_new_tokens=1), pooling=True)
    ) for t in texts]  # fmt: skip
    vectors, steps = {}, 0
    while engine.has_unfinished():
        steps += 1
        for event in engine.step():
            assert event.finish_reason is not None and event.token_id == -1
            vectors[event.request_id] = np.array(event.embedding, dtype=np.float64)
    assert steps < len(texts)  # batched: several prompts shared a step
    got = np.stack([vectors[i] for i in ids])
    return got / np.linalg.norm(got, axis=1, keepdims=True)


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    cosine = (got * want).sum(axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() > 0.9999, cosine
    assert np.abs(got - want).max() < 1e-3


@pytest.mark.parametrize(
    ("kind", "mode"),
    [("bert", "mean"), ("qwen3", "lasttoken"), ("bert", "cls"), ("qwen3", "max")],
)
def test_engine_equals_sentence_transformers(tmp_path, kind, mode):
    folder = save_embedder(tmp_path / "st", kind, mode)
    engine = LLMEngine.from_config(
        EngineConfig(model_id=str(folder), dtype="float32", max_batch_total_tokens=2048)
    )
    spec = engine.model_info.pooling
    assert (spec.mode, spec.normalize, spec.source) == (mode, True, "modules.json")
    assert_close(pooled(engine, TEXTS), reference_embeddings(folder, TEXTS))


@pytest.mark.parametrize(("kind", "mode"), [("bert", "mean"), ("qwen3", "lasttoken")])
def test_token_embeddings_equal_sentence_transformers(tmp_path, kind, mode):
    """Token embeddings (TEI's `/embed_all`) asked beside pooled vectors, all queued at once: each text's
    tokens' final hidden states equal sentence-transformers' `output_value="token_embeddings"`, and the
    pooled requests of the same steps keep their vectors."""
    folder = save_embedder(tmp_path / "st", kind, mode)
    engine = LLMEngine.from_config(
        EngineConfig(model_id=str(folder), dtype="float32", max_batch_total_tokens=2048)
    )
    params = SamplingParams(max_new_tokens=1)
    asks = [(t, tokens) for t in TEXTS for tokens in (True, False)]
    ids = [
        engine.add_validated_request(
            engine.validate(engine.tokenizer.encode(t), params, pooling=True, token_embeddings=tokens)
        )
        for t, tokens in asks
    ]
    events, steps = {}, 0
    while engine.has_unfinished():
        steps += 1
        events.update({e.request_id: e for e in engine.step()})
    assert steps < len(TEXTS)  # batched: several prompts shared a step
    want = reference_token_embeddings(folder, TEXTS)
    for i in range(len(TEXTS)):
        tokens, vector = events[ids[2 * i]], events[ids[2 * i + 1]]
        got = np.array(tokens.token_embeddings, dtype=np.float32)
        assert got.shape == want[i].shape and tokens.embedding is None
        assert np.abs(got - want[i]).max() < 1e-3
        assert vector.token_embeddings is None and len(vector.embedding) == got.shape[1]
    pooled_vectors = np.array([events[ids[2 * i + 1]].embedding for i in range(len(TEXTS))])
    normalized = pooled_vectors / np.linalg.norm(pooled_vectors, axis=1, keepdims=True)
    assert_close(normalized, reference_embeddings(folder, TEXTS))


def test_generation_is_refused_on_a_pooling_model(tmp_path):
    from tgi.core.request import ValidationError

    engine = LLMEngine.from_config(
        EngineConfig(model_id=str(save_embedder(tmp_path / "st", "qwen3", "lasttoken")), dtype="float32",
                     max_batch_total_tokens=1024)
    )  # fmt: skip
    with pytest.raises(ValidationError, match="pooling model"):
        engine.validate([4, 5], SamplingParams(max_new_tokens=2))


def test_runner_pooling_makes_a_causal_lm_an_embedder(tmp_path):
    """`--runner pooling` on a causal LM's folder (no modules.json): last-token pooling, normalized, equal to
    transformers' base model's last hidden state."""
    import torch
    from transformers import AutoModel

    from tgi.core.testing.tiny_models import save_random_model

    folder = save_random_model(tmp_path / "llama", "llama", init_std=0.2)
    config = EngineConfig(
        model_id=str(folder), dtype="float32", max_batch_total_tokens=1024, runner="pooling"
    )
    engine = LLMEngine.from_config(config)
    spec = engine.model_info.pooling
    assert (spec.mode, spec.normalize, spec.source) == ("lasttoken", True, "--runner pooling")
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]
    ids = [
        engine.add_validated_request(engine.validate(p, SamplingParams(max_new_tokens=1), pooling=True))
        for p in prompts
    ]
    got = {}
    while engine.has_unfinished():
        got.update({e.request_id: np.array(e.embedding) for e in engine.step()})
    model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        want = np.stack([model(torch.tensor([p])).last_hidden_state[0, -1].numpy() for p in prompts])
    got = np.stack([got[i] for i in ids])
    want = want / np.linalg.norm(want, axis=1, keepdims=True)
    assert_close(got / np.linalg.norm(got, axis=1, keepdims=True), want)


def test_a_decoder_embedder_saved_with_its_causal_lm_config(tmp_path):
    """A folder whose config names the causal LM (`Qwen3ForCausalLM`) but whose tensors are the base model's
    (no `model.` prefix), as some decoder embedders ship: served as the same pooling model."""
    import json

    folder = save_embedder(tmp_path / "st", "qwen3", "lasttoken")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen3ForCausalLM"]}))
    engine = LLMEngine.from_config(
        EngineConfig(model_id=str(folder), dtype="float32", max_batch_total_tokens=2048)
    )
    assert_close(pooled(engine, TEXTS), reference_embeddings(folder, TEXTS))


@pytest.mark.parametrize("kind", ["xlmr", "roberta"])
def test_xlm_roberta_with_mean_pooling(tmp_path, kind):
    """An XLM-RoBERTa (bge-m3's, multilingual-e5's architecture), and a RoBERTa (all-roberta-large-v1's), with
    mean pooling: positions numbered after the padding index in each padded row as transformers numbers
    them alone."""
    folder = save_embedder(tmp_path / "st", kind, "mean")
    engine = LLMEngine.from_config(
        EngineConfig(model_id=str(folder), dtype="float32", max_batch_total_tokens=2048)
    )
    assert engine.model_info.max_position_embeddings == 128  # 130 positions, the first two not a token's
    got, want = pooled(engine, TEXTS), reference_embeddings(folder, TEXTS)
    assert_close(got, want)
