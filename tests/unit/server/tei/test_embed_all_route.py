"""TEI's `POST /embed_all` and `POST /embed_sparse` against the fake engine: each input's tokens' vectors
(the fake's `fake_vector([token])`, asked of the engine as a token-embeddings request), `prompt_name` and
`truncate`; a sparse embedder's non-zero weights as `{index, value}`; and the refusals in TGI's (TEI's)
error shape: bad input naming the field, a model that does not embed, `/embed_sparse` on a model without a
sparse head, the other embeddings routes on a sparse embedder."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine, error_of, fake_vector, pooling_engine
from tgi.core.interfaces import PoolingSpec
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

SPEC = PoolingSpec(mode="mean", normalize=True, dimension=4, prompts={"query": "q: "})
CLASSIFIER = PoolingSpec(
    mode="cls", normalize=False, dimension=1, kind="classify", labels=("l",), activation="sigmoid"
)


def _tokens(text: str) -> list[list[float]]:
    return [fake_vector([ord(ch)], 4) for ch in text]


def _client(engine=None) -> TestClient:
    return TestClient(create_app(engine or pooling_engine(SPEC), ServerSettings()))


def test_every_token_of_every_input_unpooled_and_in_order():
    engine = pooling_engine(SPEC)
    with _client(engine) as c:
        r = c.post("/embed_all", json={"inputs": ["ab", "xyz"]})
        assert r.status_code == 200, r.text
        assert r.json() == [_tokens("ab"), _tokens("xyz")]
        assert [q.token_embeddings for q in engine.queued] == [True, True]
        assert c.post("/embed_all", json={"inputs": "ab"}).json() == [_tokens("ab")]
        assert c.post("/embed", json={"inputs": "ab"}).status_code == 200
        assert not engine.queued[-1].token_embeddings  # /embed pools


def test_prompt_name_and_truncate():
    long = "".join(chr(ord("a") + i % 26) for i in range(70))  # past --max-input-tokens (64)
    with _client() as c:
        got = c.post("/embed_all", json={"inputs": "ab", "prompt_name": "query"}).json()
        assert got == [_tokens("q: ab")]
        r = c.post("/embed_all", json={"inputs": long})
        assert r.status_code == 422 and "inputs" in error_of(r, "/embed_all")[0]
        cut = c.post("/embed_all", json={"inputs": long, "truncate": True, "truncation_direction": "Left"})
        assert cut.json() == [_tokens(long[-64:])]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"inputs": ""}, "inputs"),
        ({"inputs": ["a", ""]}, "inputs[1]"),
        ({"inputs": []}, "inputs"),
        ({"inputs": "a", "prompt_name": "nope"}, "prompt_name"),
        ({"inputs": "a", "truncation_direction": "Left"}, "truncation_direction"),
        ({"inputs": "a", "normalize": True}, "normalize"),  # `/embed`'s: hidden states come as they are
        ({"inputs": "a", "dimensions": 2}, "dimensions"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(body, field):
    with _client() as c:
        r = c.post("/embed_all", json=body)
        assert r.status_code == 422, r.text
        assert field in error_of(r, "/embed_all")[0]


@pytest.mark.parametrize("path", ["/embed_all", "/embed_sparse"])
def test_a_model_that_does_not_embed_says_what_it_serves(path):
    for engine, said in [(FakeEngine(), "generates text"), (pooling_engine(CLASSIFIER), "serves scores")]:
        with _client(engine) as c:
            r = c.post(path, json={"inputs": "a"})
            message, kind = error_of(r, path)
            assert r.status_code == 422 and said in message and kind == "validation"


def test_a_sparse_embedder_answers_its_non_zero_weights():
    engine = pooling_engine(PoolingSpec(mode="max", normalize=False, dimension=5, kind="sparse"))
    with _client(engine) as c:
        r = c.post("/embed_sparse", json={"inputs": ["ab", "c"]})
        assert r.status_code == 200, r.text
        for got, text in zip(r.json(), ["ab", "c"], strict=True):
            weights = fake_vector([ord(ch) for ch in text], 5)
            assert got == [{"index": i, "value": v} for i, v in enumerate(weights) if v != 0]
            assert all(type(e["index"]) is int for e in got)
        assert not engine.queued[-1].token_embeddings
        for path in ("/embed", "/embed_all", "/v1/embeddings"):
            r = c.post(path, json={"inputs": "a", "input": "a"})
            message, _ = error_of(r, path)
            assert r.status_code == 422 and "serves sparse embeddings (POST /embed_sparse)" in message


def test_embed_sparse_needs_a_sparse_head():
    engine = pooling_engine(SPEC)
    with _client(engine) as c:
        r = c.post("/embed_sparse", json={"inputs": "a"})
        message, kind = error_of(r, "/embed_sparse")
        assert r.status_code == 422 and kind == "validation"
        assert "POST /embed_sparse" in message and "serves embeddings" in message and "sparse head" in message
        assert not engine.queued  # nothing ran
