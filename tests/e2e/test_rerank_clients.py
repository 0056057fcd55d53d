"""Reranking and classification through real `tgi launch` servers, one per model (random-weight BERTs saved
in the test: a cross-encoder by sentence-transformers' `CrossEncoder`, a three-label classifier by
transformers), in float32, over HTTP: TEI's `/rerank` and vLLM's, Jina's and Cohere's rerank routes equal
`CrossEncoder.predict` (scores within 1e-4, same order), `/score` too; TEI's `/predict` and vLLM's `/classify`
equal transformers' softmax; each route refuses a model that cannot serve it, and bad input, naming the field."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from helpers.embedding_models import WORDS, save_classifier

QUERY = "w1 w2 w3"
DOCS = ["w3 w4 w5", "w6", "w1 w2", " ".join(WORDS[4:30]), "w9 w10 w11 w12"]
TEXTS = ["w1 w2 w3", "w5", "w7 w8 w9 w10"]
FLAGS = ("--backend", "cpu", "--dtype", "float32", "--max-input-tokens", "40", "--max-total-tokens", "64",
         "--max-client-batch-size", "8", "--max-concurrent-requests", "64")  # fmt: skip


@pytest.fixture(scope="module")
def reranker(tmp_path_factory, launch_server, stop_server):
    """(server url, `CrossEncoder.predict` of (QUERY, each of DOCS))."""
    from sentence_transformers import CrossEncoder

    root = tmp_path_factory.mktemp("rerank")
    folder = save_classifier(root / "ce", num_labels=1)
    want = CrossEncoder(str(folder), device="cpu").predict([(QUERY, d) for d in DOCS])
    assert np.diff(np.sort(want)).min() > 1e-3  # no near-tie decides the order
    server = launch_server(root, "--model-id", str(folder), *FLAGS)
    yield server.url, want
    assert stop_server(server) == 0, server.logs()


@pytest.fixture(scope="module")
def labeller(tmp_path_factory, launch_server, stop_server):
    """(server url, transformers' softmax of each of TEXTS' logits)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    root = tmp_path_factory.mktemp("classify")
    folder = save_classifier(root / "cls", num_labels=3, cross_encoder=False)
    model, tokenizer = (
        AutoModelForSequenceClassification.from_pretrained(folder).eval(),
        AutoTokenizer.from_pretrained(folder),
    )
    with torch.no_grad():
        want = (
            torch.cat([model(**tokenizer(t, return_tensors="pt")).logits for t in TEXTS]).softmax(-1).numpy()
        )
    server = launch_server(root, "--model-id", str(folder), *FLAGS)
    yield server.url, want
    assert stop_server(server) == 0, server.logs()


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=60)


def test_tei_rerank_equals_cross_encoder(reranker):
    url, want = reranker
    r = post(url, "/rerank", {"query": QUERY, "texts": DOCS, "return_text": True})
    assert r.status_code == 200, r.text
    got = r.json()
    assert [x["index"] for x in got] == list(np.argsort(-want))
    assert max(abs(x["score"] - want[x["index"]]) for x in got) < 1e-4
    assert all(x["text"] == DOCS[x["index"]] for x in got)
    raw = post(url, "/rerank", {"query": QUERY, "texts": DOCS[:2], "raw_scores": True}).json()
    assert all(abs(1 / (1 + np.exp(-x["score"])) - want[x["index"]]) < 1e-4 and "text" not in x for x in raw)


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_jina_cohere_rerank_equals_cross_encoder(reranker, path):
    url, want = reranker
    r = post(url, path, {"model": "m", "query": QUERY, "documents": DOCS, "top_n": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [x["index"] for x in body["results"]] == list(np.argsort(-want))[:3]
    assert max(abs(x["relevance_score"] - want[x["index"]]) for x in body["results"]) < 1e-4
    assert all(x["document"] == {"text": DOCS[x["index"]]} for x in body["results"])
    assert body["usage"]["total_tokens"] > len(DOCS)


def test_score_one_against_many_and_pairwise(reranker):
    url, want = reranker
    one = post(url, "/score", {"text_1": QUERY, "text_2": DOCS}).json()
    assert [d["index"] for d in one["data"]] == list(range(len(DOCS)))
    assert max(abs(d["score"] - w) for d, w in zip(one["data"], want, strict=True)) < 1e-4
    pairwise = post(url, "/v1/score", {"text_1": [QUERY, QUERY], "text_2": DOCS[:2]}).json()
    assert max(abs(d["score"] - w) for d, w in zip(pairwise["data"], want[:2], strict=True)) < 1e-4


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/rerank", {"query": QUERY, "texts": []}, "texts"),
        ("/rerank", {"query": "", "texts": ["w1"]}, "query"),
        ("/v1/rerank", {"query": QUERY, "documents": ["w1", ""]}, "documents[1]"),
        ("/v2/rerank", {"query": QUERY, "documents": []}, "documents"),
        ("/rerank", {"query": QUERY, "texts": ["w1 " * 50]}, "texts[0]"),  # too long, not truncated
        ("/score", {"text_1": [QUERY] * 2, "text_2": DOCS}, "text_1"),
        (
            "/rerank",
            {"query": QUERY, "texts": ["w1"], "truncation_direction": "Left"},
            "truncation_direction",
        ),
    ],
)
def test_bad_input_is_a_422_naming_the_field(reranker, path, body, field):
    r = post(reranker[0], path, body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    message = error if isinstance(error, str) else error["message"]
    assert f"`{field}`" in message
    if isinstance(error, dict):  # OpenAI's shape on vLLM's routes
        assert error["param"] == field.split("[")[0]


def test_truncate_cuts_the_text_not_the_query(reranker):
    r = post(reranker[0], "/rerank", {"query": QUERY, "texts": ["w1 " * 50, "w2"], "truncate": True})
    assert r.status_code == 200, r.text and sorted(x["index"] for x in r.json()) == [0, 1]


def test_routes_the_cross_encoder_cannot_serve_say_what_it_serves(reranker):
    url = reranker[0]
    for path, body in [
        ("/v1/embeddings", {"input": "w1"}),
        ("/embed", {"inputs": "w1"}),
        ("/generate", {"inputs": "w1"}),
    ]:
        r = post(url, path, body)
        assert r.status_code == 422 and "/rerank" in r.text, (path, r.text)
    info = httpx.get(url + "/info").json()
    assert info["model_pipeline_tag"] == "text-classification" and info["pooling"]["labels"] == ["label_0"]
    assert {"/rerank", "/v1/rerank", "/predict"} <= set(info["pooling"]["routes"])


def test_predict_and_classify_equal_transformers(labeller):
    url, want = labeller
    got = post(url, "/predict", {"inputs": TEXTS}).json()
    for scores, w in zip(got, want, strict=True):
        assert [s["label"] for s in scores] == [f"label_{i}" for i in np.argsort(-w)]
        assert max(abs(s["score"] - w[int(s["label"][-1])]) for s in scores) < 1e-4
    one = post(url, "/predict", {"inputs": TEXTS[0]}).json()
    assert one[0]["label"] == f"label_{int(np.argmax(want[0]))}"
    body = post(url, "/classify", {"model": "m", "input": TEXTS}).json()
    assert [d["label"] for d in body["data"]] == [f"label_{int(np.argmax(w))}" for w in want]
    assert np.abs(np.array([d["probs"] for d in body["data"]]) - want).max() < 1e-4
    assert all(d["num_classes"] == 3 for d in body["data"])


def test_rerank_on_a_three_label_model_says_what_it_serves(labeller):
    for path, body in [
        ("/rerank", {"query": QUERY, "texts": ["w1"]}),
        ("/v1/rerank", {"query": QUERY, "documents": ["w1"]}),
        ("/score", {"text_1": "a", "text_2": "b"}),
    ]:
        r = post(labeller[0], path, body)
        assert r.status_code == 422 and "3 labels" in r.text and "/predict" in r.text, (path, r.text)
