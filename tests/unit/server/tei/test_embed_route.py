"""TEI's `POST /embed` against the fake engine: `inputs` shapes, `normalize`, `truncate` and its direction,
`prompt_name`, `dimensions`, and refusals naming the field in TGI's (TEI's) error shape."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from fake_engine import error_of, fake_vector, pooling_engine
from tgi.core.interfaces import PoolingSpec
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

SPEC = PoolingSpec(
    mode="lasttoken",
    normalize=True,
    dimension=6,
    prompts={"query": "q: ", "doc": ""},
    default_prompt_name=None,
)


def _unit(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


def _ids(text: str) -> list[int]:
    return [ord(ch) for ch in text]


def _client(spec: PoolingSpec = SPEC) -> TestClient:
    return TestClient(create_app(pooling_engine(spec), ServerSettings()))


def test_one_text_and_several():
    with _client() as c:
        r = c.post("/embed", json={"inputs": "ab"})
        assert r.status_code == 200, r.text
        assert r.json() == [pytest.approx(_unit(fake_vector(_ids("ab"), 6)))]
        two = c.post("/embed", json={"inputs": ["ab", "c"], "normalize": False}).json()
        assert two == [pytest.approx(fake_vector(_ids(t), 6)) for t in ("ab", "c")]


def test_prompt_name_goes_before_the_text():
    with _client() as c:
        got = c.post("/embed", json={"inputs": "ab", "prompt_name": "query", "normalize": False}).json()
        assert got == [pytest.approx(fake_vector(_ids("q: ab"), 6))]
        r = c.post("/embed", json={"inputs": "ab", "prompt_name": "nope"})
        assert r.status_code == 422
        message, kind = error_of(r, "/embed")
        assert "prompt_name" in message and kind == "validation"


def test_truncate_keeps_the_right_or_the_left_end():
    long = "".join(chr(ord("a") + i % 26) for i in range(70))  # past --max-input-tokens (64)
    with _client() as c:
        r = c.post("/embed", json={"inputs": long})
        assert r.status_code == 422 and "inputs" in error_of(r, "/embed")[0]
        right = c.post("/embed", json={"inputs": long, "truncate": True, "normalize": False}).json()
        assert right == [pytest.approx(fake_vector(_ids(long[:64]), 6))]
        left = c.post(
            "/embed",
            json={"inputs": long, "truncate": True, "truncation_direction": "Left", "normalize": False},
        ).json()
        assert left == [pytest.approx(fake_vector(_ids(long[-64:]), 6))]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"inputs": ""}, "inputs"),
        ({"inputs": []}, "inputs"),
        ({"inputs": "a", "truncation_direction": "Up", "truncate": True}, "truncation_direction"),
        ({"inputs": "a", "truncation_direction": "Left"}, "truncation_direction"),
        ({"inputs": "a", "dimensions": 2}, "dimensions"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(body, field):
    with _client() as c:
        r = c.post("/embed", json=body)
        assert r.status_code == 422, r.text
        message, kind = error_of(r, "/embed")
        assert field in message and kind == "validation"


def test_dimensions_on_a_matryoshka_model():
    spec = PoolingSpec(mode="cls", normalize=True, dimension=6, matryoshka=True)
    with _client(spec) as c:
        got = c.post("/embed", json={"inputs": "ab", "dimensions": 3}).json()
        assert got == [pytest.approx(_unit(fake_vector(_ids("ab"), 6)[:3]))]
        assert c.post("/embed", json={"inputs": "ab", "dimensions": 7}).status_code == 422
