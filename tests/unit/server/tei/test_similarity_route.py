"""TEI's `POST /similarity` against the fake engine: the cosine of the source sentence's vector with each
sentence's (`fake_vector`s), its `parameters` (`prompt_name`, `truncate`), one admission for all its texts,
and refusals naming the field in TGI's (TEI's) error shape."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine, error_of, fake_vector, pooling_engine
from tgi.core.interfaces import PoolingSpec
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

SPEC = PoolingSpec(mode="mean", normalize=True, dimension=6, prompts={"query": "q: "})


def _cosine(a: list[float], b: list[float]) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _vector(text: str) -> list[float]:
    return fake_vector([ord(ch) for ch in text], 6)


def _body(source: str, sentences: list[str], **parameters) -> dict:
    body = {"inputs": {"source_sentence": source, "sentences": sentences}}
    return {**body, "parameters": parameters} if parameters else body


def _client(engine=None, **settings) -> TestClient:
    return TestClient(create_app(engine or pooling_engine(SPEC), ServerSettings(**settings)))


def test_the_cosine_of_the_source_with_each_sentence_in_order():
    sentences = ["abc", "a", "zzzz"]
    with _client() as c:
        r = c.post("/similarity", json=_body("ab", sentences))
        assert r.status_code == 200, r.text
        assert r.json() == [pytest.approx(_cosine(_vector("ab"), _vector(s))) for s in sentences]


def test_prompt_name_goes_before_every_text_and_truncate_cuts_them():
    long = "".join(chr(ord("a") + i % 26) for i in range(70))  # past --max-input-tokens (64)
    with _client() as c:
        got = c.post("/similarity", json=_body("ab", ["c"], prompt_name="query")).json()
        assert got == [pytest.approx(_cosine(_vector("q: ab"), _vector("q: c")))]
        r = c.post("/similarity", json=_body("ab", ["c", long]))
        assert r.status_code == 422 and "`inputs.sentences[1]`" in error_of(r, "/similarity")[0]
        cut = c.post("/similarity", json=_body("ab", [long], truncate=True, truncation_direction="Left"))
        assert cut.json() == [pytest.approx(_cosine(_vector("ab"), _vector(long[-64:])))]


def test_its_texts_are_one_admission():
    with _client(max_client_batch_size=3) as c:
        assert c.post("/similarity", json=_body("a", ["b", "c"])).status_code == 200
        r = c.post("/similarity", json=_body("a", ["b", "c", "d"]))  # 4 texts, 3 allowed
        assert r.status_code == 422 and "--max-client-batch-size" in error_of(r, "/similarity")[0]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_body("a", []), "inputs.sentences"),
        (_body("", ["b"]), "inputs.source_sentence"),
        (_body("a", ["b", ""]), "inputs.sentences[1]"),
        (_body("a", ["b"], prompt_name="nope"), "prompt_name"),
        (_body("a", ["b"], truncation_direction="Left"), "truncation_direction"),
        ({**_body("a", ["b"]), "truncate": True}, "truncate"),  # TEI reads it in `parameters`
        ({"inputs": {"source_sentence": "a"}}, "sentences"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(body, field):
    with _client() as c:
        r = c.post("/similarity", json=body)
        assert r.status_code == 422, r.text
        message, _ = error_of(r, "/similarity")
        assert field in message


def test_a_model_that_does_not_embed_says_what_it_serves():
    classifier = PoolingSpec(
        mode="cls", normalize=False, dimension=1, kind="classify", labels=("l",), activation="sigmoid"
    )
    for engine, said in [(FakeEngine(), "generates text"), (pooling_engine(classifier), "serves scores")]:
        with _client(engine) as c:
            r = c.post("/similarity", json=_body("a", ["b"]))
            message, kind = error_of(r, "/similarity")
            assert r.status_code == 422 and said in message and kind == "validation"
