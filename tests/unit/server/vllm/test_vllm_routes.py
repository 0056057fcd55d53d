"""vLLM's scoring routes against the fake engine, before any model runs: on a model that cannot serve them (a
generative one, an embedder) each answers a 422 saying what the model serves, in OpenAI's shape (also outside
`/v1`, but for `/rerank`, TEI's path too, in TGI's); fields vLLM, Jina or Cohere define and this server does not serve are refused by name; `/rerank` with
`documents` is this API's, with `texts` TEI's."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine, error_of, pooling_engine
from tgi.core.interfaces import PoolingSpec
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

ROUTES = [
    ("/v1/rerank", {"query": "q", "documents": ["a"]}),
    ("/rerank", {"query": "q", "documents": ["a"]}),
    ("/v2/rerank", {"query": "q", "documents": [{"text": "a"}]}),
    ("/score", {"text_1": "q", "text_2": ["a"]}),
    ("/v1/score", {"text_1": "q", "text_2": "a"}),
    ("/classify", {"input": "a"}),
    ("/v1/classify", {"input": ["a"]}),
]
EMBEDDER = PoolingSpec(mode="mean", normalize=True, dimension=4)


def message_of(r, path: str) -> str:
    if path == "/rerank":  # TEI's path too: TGI's (TEI's) shape, whichever the body
        assert r.status_code == 422, r.text
        return error_of(r, path)[0]
    return openai_error(r)["message"]


def openai_error(r, status: int = 422) -> dict:
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"} and set(r.json()["error"]) == {"message", "type", "param", "code"}
    return r.json()["error"]


@pytest.mark.parametrize(("path", "body"), ROUTES)
def test_a_generative_model_says_what_it_serves(path, body):
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c:
        message = message_of(c.post(path, json=body), path)
    assert "generates text" in message and "scores (reranking, classification) are not served" in message


@pytest.mark.parametrize(("path", "body"), ROUTES)
def test_an_embedder_says_what_it_serves(path, body):
    with TestClient(create_app(pooling_engine(EMBEDDER), ServerSettings())) as c:
        message = message_of(c.post(path, json=body), path)
    assert "serves embeddings (POST /v1/embeddings" in message


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/v1/rerank",
            {"query": "q", "documents": ["a"], "truncate_prompt_tokens": 8},
            "truncate_prompt_tokens",
        ),
        ("/v2/rerank", {"query": "q", "documents": ["a"], "max_tokens_per_doc": 8}, "max_tokens_per_doc"),
        ("/score", {"text_1": "q", "text_2": "a", "priority": 1}, "priority"),
        ("/classify", {"input": "a", "softmax": False}, "softmax"),
    ],
)
def test_fields_not_served_are_refused_by_name(path, body, field):
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c:
        error = openai_error(c.post(path, json=body))
    assert f"`{field}`" in error["message"] and error["param"] == field


def test_rerank_is_teis_with_texts():
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c:
        r = c.post("/rerank", json={"query": "q", "texts": ["a"]})
        assert r.status_code == 422 and set(r.json()) == {"error", "error_type"}  # TGI's (TEI's) shape
        r = c.post("/rerank", json={"query": "q", "documents": "a"})  # Jina's, malformed: its 422
        assert r.status_code == 422 and "documents" in r.text
        assert c.post("/rerank", content=b"[1]").status_code == 422
