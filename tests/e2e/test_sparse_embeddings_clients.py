"""A SPLADE sparse embedder through a real `tgi launch` server (a random-weight BERT masked LM saved by
sentence-transformers' `SparseEncoder` in the test), in float32: TEI's `/embed_sparse` over HTTP answers
each text's non-zero weights, equal to `SparseEncoder.encode`'s (within 1e-4, the same entries), also for
16 concurrent requests; the dense embeddings routes are refused naming `/embed_sparse`."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from helpers.concurrent_posts import post_concurrently
from helpers.embedding_models import WORDS, reference_sparse_embeddings, save_splade

TEXTS = ["w1 w2 w3", "w5", " ".join(WORDS[4:30]), "w7 w8 w9 w10 w11"]


@pytest.fixture(scope="module")
def splade(tmp_path_factory, launch_server, stop_server):
    """(server, reference weights of TEXTS [N, vocab])."""
    root = tmp_path_factory.mktemp("splade")
    folder = save_splade(root / "st")
    server = launch_server(
        root, "--model-id", str(folder), "--backend", "cpu", "--dtype", "float32",
        "--max-concurrent-requests", "64", "--max-total-tokens", "128", "--max-batch-total-tokens", "4096",
    )  # fmt: skip
    yield server, reference_sparse_embeddings(folder, TEXTS)
    assert stop_server(server) == 0, server.logs()


def dense(entries: list[dict], size: int) -> np.ndarray:
    """`/embed_sparse`'s `{index, value}` entries as a dense vector (checking they come by index, non-zero)."""
    indices = [e["index"] for e in entries]
    assert indices == sorted(set(indices)) and all(e["value"] != 0 for e in entries)
    vector = np.zeros(size, dtype=np.float32)
    vector[indices] = [e["value"] for e in entries]
    return vector


def test_embed_sparse_equals_the_sparse_encoder(splade):
    server, want = splade
    r = httpx.post(server.url + "/embed_sparse", json={"inputs": TEXTS}, timeout=60)
    assert r.status_code == 200, r.text
    got = np.stack([dense(entries, want.shape[1]) for entries in r.json()])
    assert np.abs(got - want).max() < 1e-4 and ((got > 0) == (want > 0)).all()
    bodies = [{"inputs": TEXTS[i % len(TEXTS)]} for i in range(16)]
    answers = post_concurrently(server.url + "/embed_sparse", bodies)
    for i, r in enumerate(answers):
        assert r.status_code == 200, r.text
        assert np.abs(dense(r.json()[0], want.shape[1]) - want[i % len(TEXTS)]).max() < 1e-4


def test_the_dense_routes_are_refused_naming_embed_sparse(splade):
    server, _ = splade
    for path, body in [
        ("/embed", {"inputs": "w1"}),
        ("/similarity", {"inputs": {"source_sentence": "w1", "sentences": ["w2"]}}),
    ]:
        r = httpx.post(server.url + path, json=body, timeout=60)
        assert r.status_code == 422 and "/embed_sparse" in r.json()["error"], r.text
    info = httpx.get(server.url + "/info").json()
    assert info["pooling"]["kind"] == "sparse" and info["model_pipeline_tag"] == "feature-extraction"
    assert info["pooling"]["routes"] == ["/embed_sparse"]
