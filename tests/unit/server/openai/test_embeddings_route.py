"""OpenAI's `POST /v1/embeddings` against the fake engine (a pooling model whose vectors are `fake_vector`s
of the prompt's characters): the input shapes, float and base64, usage, Matryoshka `dimensions` only where the
model declares it, refusals naming the field, and the routes of the other kind refused by each model."""

from __future__ import annotations

import base64
import math
import struct

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine, error_of, fake_vector, pooling_engine
from tgi.core.interfaces import PoolingSpec
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

SPEC = PoolingSpec(mode="mean", normalize=True, dimension=8)


def _unit(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


def _client(spec: PoolingSpec = SPEC, **settings) -> TestClient:
    return TestClient(create_app(pooling_engine(spec), ServerSettings(**settings)))


def test_texts_are_pooled_in_order_with_usage():
    with _client() as c:
        r = c.post("/v1/embeddings", json={"input": ["ab", "xyz"], "model": "fake/model"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "list" and body["model"] == "fake/model"
        assert [d["index"] for d in body["data"]] == [0, 1]
        for d, text in zip(body["data"], ["ab", "xyz"], strict=True):
            assert d["object"] == "embedding"
            assert d["embedding"] == pytest.approx(_unit(fake_vector([ord(ch) for ch in text], 8)))
        assert body["usage"] == {"prompt_tokens": 5, "total_tokens": 5}


def test_token_ids_one_list_or_several():
    with _client() as c:
        one = c.post("/v1/embeddings", json={"input": [97, 98]}).json()["data"]
        assert len(one) == 1 and one[0]["embedding"] == pytest.approx(_unit(fake_vector([97, 98], 8)))
        two = c.post("/v1/embeddings", json={"input": [[97], [98, 99]]}).json()["data"]
        assert [d["embedding"] for d in two] == [
            pytest.approx(_unit(fake_vector(ids, 8))) for ids in ([97], [98, 99])
        ]


def test_base64_is_little_endian_float32():
    with _client() as c:
        floats = c.post("/v1/embeddings", json={"input": "abc"}).json()["data"][0]["embedding"]
        b64 = c.post("/v1/embeddings", json={"input": "abc", "encoding_format": "base64"}).json()
        raw = base64.b64decode(b64["data"][0]["embedding"])
        assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(floats, abs=1e-6)


def test_a_model_without_normalize_answers_raw_vectors():
    with _client(PoolingSpec(mode="cls", normalize=False, dimension=4)) as c:
        got = c.post("/v1/embeddings", json={"input": "ab"}).json()["data"][0]["embedding"]
        assert got == pytest.approx(fake_vector([97, 98], 4))


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": ["a", ""]}, "input"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "dimensions": 4}, "dimensions"),
        ({"input": "a", "truncate_prompt_tokens": 3}, "truncate_prompt_tokens"),
        ({"input": "a" * 65}, "input"),  # past --max-input-tokens (64), nothing truncates
        ({"input": [[0x110001]]}, "input"),  # past the vocabulary
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(body, param):
    with _client() as c:
        r = c.post("/v1/embeddings", json=body)
        assert r.status_code == 422, r.text
        message, _ = error_of(r, "/v1/embeddings")
        assert r.json()["error"]["param"] == param, message


def test_matryoshka_dimensions_cut_then_renormalize():
    spec = PoolingSpec(
        mode="mean", normalize=True, dimension=8, matryoshka=True, matryoshka_dimensions=(2, 4)
    )
    with _client(spec) as c:
        got = c.post("/v1/embeddings", json={"input": "ab", "dimensions": 4}).json()["data"][0]["embedding"]
        assert got == pytest.approx(_unit(fake_vector([97, 98], 8)[:4]))
        r = c.post("/v1/embeddings", json={"input": "ab", "dimensions": 3})
        assert r.status_code == 422 and r.json()["error"]["param"] == "dimensions"


def test_more_inputs_than_the_client_batch_size_is_refused_by_name():
    with _client(max_client_batch_size=2) as c:
        r = c.post("/v1/embeddings", json={"input": ["a", "b", "c"]})
        assert r.status_code == 422 and r.json()["error"]["param"] == "input"


def test_a_full_server_answers_429():
    with _client(max_concurrent_requests=1) as c:
        r = c.post("/v1/embeddings", json={"input": ["a", "b"]})
        assert r.status_code == 429, r.text


def test_generation_on_a_pooling_model_names_what_it_serves():
    with _client() as c:
        for path, body in [
            ("/generate", {"inputs": "hi"}),
            ("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ]:
            r = c.post(path, json=body)
            assert r.status_code == 422, (path, r.text)
            message, _ = error_of(r, path)
            assert "/v1/embeddings" in message and "pooling model" in message
        info = c.get("/info").json()
        assert info["pooling"]["mode"] == "mean" and info["model_pipeline_tag"] == "feature-extraction"


def test_embeddings_on_a_generative_model_are_refused():
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c:
        r = c.post("/v1/embeddings", json={"input": "hi"})
        assert r.status_code == 422 and "not a pooling model" in r.json()["error"]["message"]
        assert c.get("/info").json()["pooling"] is None
