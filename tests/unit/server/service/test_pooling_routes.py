"""Which routes a pooling model serves (`tgi.server.service.pooling_routes`), against the app itself with the
fake engine: for each kind of model (an embedder, a cross-encoder, a classifier of three labels, a SPLADE
model) every route `/info` lists answers 200, and every other pooling route a 4xx that names what the model
serves."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fake_engine import pooling_engine
from tgi.core.interfaces import PoolingSpec
from tgi.server.app import create_app
from tgi.server.service.pooling_routes import POOLING_ROUTES, serves
from tgi.server.service.settings import ServerSettings

# the fake tokenizer makes a pair the first text's characters (a character is a token), and the classifier's
# path reads its last token as the separator of a pair's two texts: a first text ending with it twice
BODIES = {
    "/v1/embeddings": {"input": "ab"},
    "/embed": {"inputs": "ab"},
    "/embed_all": {"inputs": "ab"},
    "/similarity": {"inputs": {"source_sentence": "ab", "sentences": ["c"]}},
    "/api/embed": {"model": "fake/model", "input": "ab"},
    "/api/embeddings": {"model": "fake/model", "prompt": "ab"},
    "/rerank": {"query": "bb", "texts": ["b"]},
    "/v1/rerank": {"query": "bb", "documents": ["b"]},
    "/v2/rerank": {"query": "bb", "documents": ["b"]},
    "/score": {"text_1": "bb", "text_2": "b"},
    "/v1/score": {"text_1": "bb", "text_2": "b"},
    "/predict": {"inputs": "a"},
    "/classify": {"input": "a"},
    "/v1/classify": {"input": "a"},
    "/embed_sparse": {"inputs": "ab"},
}
SPECS = {
    "embedder": PoolingSpec(mode="mean", normalize=True, dimension=4),
    "cross-encoder": PoolingSpec(
        mode="cls", normalize=False, dimension=1, kind="classify", labels=("l",), activation="sigmoid"
    ),
    "three labels": PoolingSpec(
        mode="cls",
        normalize=False,
        dimension=3,
        kind="classify",
        labels=("a", "b", "c"),
        activation="identity",
    ),
    "splade": PoolingSpec(mode="max", normalize=False, dimension=5, kind="sparse"),
}


def test_every_listed_route_is_one_of_the_app():
    app = create_app(pooling_engine(SPECS["embedder"]), ServerSettings())
    app_routes = set(app.openapi()["paths"])
    listed = {route for routes in POOLING_ROUTES.values() for route in routes}
    assert listed <= app_routes and listed == set(BODIES)


@pytest.mark.parametrize("model", sorted(SPECS))
def test_info_lists_the_routes_served_and_the_others_refuse(model):
    spec = SPECS[model]
    with TestClient(create_app(pooling_engine(spec), ServerSettings())) as c:
        served = c.get("/info").json()["pooling"]["routes"]
        assert served and set(served) <= set(BODIES)
        for path, body in BODIES.items():
            r = c.post(path, json=body)
            if path in served:
                assert r.status_code == 200, (path, r.text)
            else:  # each API's 4xx (Ollama's is a 400) in its own shape, checked by its routes' tests
                assert r.status_code in (400, 422), (path, r.text)
                error = r.json()["error"]
                message = error["message"] if isinstance(error, dict) else error
                assert serves(spec) in message or "labels" in message, (path, message)
    if model == "three labels":  # a classifier of more labels predicts, but does not rerank nor score
        assert served == ["/predict", "/classify", "/v1/classify"]
