"""Embeddings through real `tgi launch` servers, one per model (random-weight models saved with
sentence-transformers in the test: a BERT with mean pooling + Normalize, a Qwen3-shaped decoder with last-token
pooling + Normalize), in float32: OpenAI's official client (`client.embeddings.create`, float and base64)
and TEI's `/embed` over HTTP equal sentence-transformers' own `encode` (and TEI's `/similarity` the cosines of
its vectors), and so do 32 concurrent requests and Ollama's official client (`embed`, `embeddings`)."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import openai
import pytest
from helpers.concurrent_posts import post_concurrently
from helpers.embedding_models import WORDS, reference_embeddings, reference_token_embeddings, save_embedder

TEXTS = ["w1 w2 w3", "w5", " ".join(WORDS[4:30]), "w7 w8 w9 w10 w11"]
MODELS = {"bert": "mean", "qwen3": "lasttoken"}


@pytest.fixture(scope="module", params=sorted(MODELS))
def embedder(request, tmp_path_factory, launch_server, stop_server):
    """(server, reference vectors of TEXTS, the model's folder) for one model."""
    root = tmp_path_factory.mktemp(f"embed-{request.param}")
    folder = save_embedder(root / "st", request.param, MODELS[request.param])
    server = launch_server(
        root, "--model-id", str(folder), "--backend", "cpu", "--dtype", "float32",
        "--max-concurrent-requests", "64", "--max-client-batch-size", "8", "--max-total-tokens", "128",
        "--max-batch-total-tokens", "4096",
    )  # fmt: skip
    yield server, reference_embeddings(folder, TEXTS), folder
    assert stop_server(server) == 0, server.logs()


def assert_close(got, want) -> None:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    cosine = (got * want).sum(axis=-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cosine.min() > 0.9999, cosine
    assert np.abs(got - want).max() < 1e-3


def test_openai_client_float_and_base64(embedder):
    server, want, _ = embedder
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    floats = client.embeddings.create(model="m", input=TEXTS, encoding_format="float")
    assert [d.index for d in floats.data] == list(range(len(TEXTS)))
    assert_close([d.embedding for d in floats.data], want)
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > len(TEXTS)
    decoded = client.embeddings.create(model="m", input=TEXTS)  # the client asks for base64 and decodes it
    assert_close([d.embedding for d in decoded.data], want)
    raw = client.embeddings.create(model="m", input=TEXTS[0], encoding_format="base64").data[0].embedding
    assert_close(np.frombuffer(base64.b64decode(raw), dtype="<f4"), want[0])


def test_tei_embed_and_similarity_over_http(embedder):
    server, want, _ = embedder
    r = httpx.post(server.url + "/embed", json={"inputs": TEXTS}, timeout=60)
    assert r.status_code == 200, r.text
    assert_close(r.json(), want)
    sentences = {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}}
    similarity = httpx.post(server.url + "/similarity", json=sentences, timeout=60)
    assert similarity.status_code == 200, similarity.text
    unit = want / np.linalg.norm(want, axis=1, keepdims=True)  # sentence-transformers' cos_sim
    assert np.abs(np.array(similarity.json()) - unit[1:] @ unit[0]).max() < 1e-4
    info = httpx.get(server.url + "/info").json()
    assert info["pooling"]["normalize"] and info["model_pipeline_tag"] == "feature-extraction"
    assert {"/embed", "/embed_all", "/similarity"} <= set(info["pooling"]["routes"])
    r = httpx.post(server.url + "/generate", json={"inputs": "w1", "parameters": {"max_new_tokens": 2}})
    assert r.status_code == 422 and "/v1/embeddings" in r.json()["error"]


def test_tei_embed_all_over_http(embedder):
    """`/embed_all`: each text's tokens' hidden states, as sentence-transformers' token embeddings; `/embed_sparse`
    refused by name (no sparse head)."""
    server, _, folder = embedder
    r = httpx.post(server.url + "/embed_all", json={"inputs": TEXTS}, timeout=60)
    assert r.status_code == 200, r.text
    want = reference_token_embeddings(folder, TEXTS)
    for got, ref in zip(r.json(), want, strict=True):
        got = np.asarray(got, dtype=np.float32)
        assert got.shape == ref.shape and np.abs(got - ref).max() < 1e-3
    r = httpx.post(server.url + "/embed_sparse", json={"inputs": TEXTS[0]}, timeout=60)
    assert r.status_code == 422 and "sparse" in r.json()["error"], r.text


def test_32_concurrent_requests_all_equal_the_reference(embedder, get_metrics):
    server, want, _ = embedder
    before = get_metrics(server.url)
    answers = post_concurrently(server.url + "/embed", [{"inputs": TEXTS[i % len(TEXTS)]} for i in range(32)])
    for i, r in enumerate(answers):
        assert r.status_code == 200, r.text
        assert_close(r.json()[0], want[i % len(TEXTS)])
    after = get_metrics(server.url)  # counted as the generation routes' requests are
    assert after["tgi_request_success"] - before["tgi_request_success"] == 32
    assert after["tgi_request_input_length_count"] - before["tgi_request_input_length_count"] == 32


def test_ollama_client_embed_and_the_older_embeddings(embedder):
    """Ollama's official client: `embed` (texts, its durations and token count) and the older `embeddings`."""
    import ollama

    server, want, _ = embedder
    client = ollama.Client(host=server.url)
    model = client.list().models[0].model  # the one served, as Ollama names it
    got = client.embed(model=model, input=TEXTS)
    assert_close(got.embeddings, want)
    assert got.prompt_eval_count > len(TEXTS) and got.total_duration > 0
    assert_close(client.embeddings(model=model, prompt=TEXTS[1]).embedding, want[1])
    with pytest.raises(ollama.ResponseError, match="dimensions"):  # not a Matryoshka model
        client.embed(model=model, input=TEXTS[0], dimensions=8)
