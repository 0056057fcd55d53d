"""TEI's `/rerank` and `/predict` against the fake engine, before any model runs: on a generative model or an
embedder, a 422 in TGI's (TEI's) shape saying what the model serves; `truncation_direction` checked as
`/embed` checks it."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine, error_of, pooling_engine
from tgi.core.interfaces import PoolingSpec
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

ROUTES = [("/rerank", {"query": "q", "texts": ["a", "b"]}), ("/predict", {"inputs": ["a", "b"]})]


@pytest.mark.parametrize(("path", "body"), ROUTES)
def test_models_that_cannot_serve_them_say_what_they_serve(path, body):
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c:
        message, kind = error_of(c.post(path, json=body), path)
        assert "generates text" in message and kind == "validation"
    embedder = pooling_engine(PoolingSpec(mode="cls", normalize=False, dimension=4))
    with TestClient(create_app(embedder, ServerSettings())) as c:
        message, _ = error_of(c.post(path, json=body), path)
        assert "serves embeddings" in message


@pytest.mark.parametrize(("path", "body"), ROUTES)
def test_truncation_direction_is_checked(path, body):
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c:
        r = c.post(path, json={**body, "truncation_direction": "Up", "truncate": True})
        message, _ = error_of(r, path)
        assert r.status_code == 422 and "`truncation_direction`" in message
