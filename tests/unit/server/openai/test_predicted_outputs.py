"""OpenAI's `prediction` on chat completions against the fake engine: read (a string or text parts), tokenized
into the engine's request, counted in usage (streamed too), refused where it is not a content prediction.
What it does to the answer is the engine's (tests/e2e/test_predicted_outputs_e2e.py, the real model)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.core.request import FinishReason, TokenEvent
from tgi.server.app import create_app
from tgi.server.openai.prediction import prediction_counts, prediction_usage

MSGS = [{"role": "user", "content": "Hi"}]
DETAILS = {
    "accepted_prediction_tokens": 0,
    "rejected_prediction_tokens": 0,
}  # the fake engine guesses nothing


@pytest.fixture
def engine():
    return FakeEngine()


def _chat(engine, **extra):
    with TestClient(create_app(engine)) as client:
        return client.post("/v1/chat/completions", json={"messages": MSGS, "max_tokens": 3, **extra})


@pytest.mark.parametrize(
    "content", ["def f():", [{"type": "text", "text": "def "}, {"type": "text", "text": "f():"}]]
)
def test_a_prediction_reaches_the_engine_as_tokens_and_usage_counts_it(engine, content):
    r = _chat(engine, prediction={"type": "content", "content": content}, n=2)
    assert r.status_code == 200, r.text
    assert [request.prediction for request in engine.queued] == [
        tuple(map(ord, "def f():"))
    ] * 2  # per choice
    assert r.json()["usage"]["completion_tokens_details"] == DETAILS


def test_streamed_usage_counts_it_in_the_last_chunk(engine):
    r = _chat(
        engine,
        prediction={"type": "content", "content": "x"},
        stream=True,
        stream_options={"include_usage": True},
    )
    events = [json.loads(p[len("data: ") :]) for p in r.text.split("\n\n") if p.startswith("data: {")]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens_details"] == DETAILS


def test_without_a_prediction_usage_has_no_counts_of_one(engine):
    assert "completion_tokens_details" not in _chat(engine).json()["usage"]
    assert "completion_tokens_details" not in _chat(engine, prediction=None).json()["usage"]
    assert engine.queued[-1].prediction == ()


@pytest.mark.parametrize(
    ("prediction", "field"),
    [
        ({"type": "text", "content": "x"}, "prediction.type"),
        ({"type": "content", "content": [{"type": "image_url", "text": "x"}]}, "prediction.content[0].type"),
        ({"type": "content"}, "prediction.content"),
    ],
)
def test_what_is_not_a_content_prediction_is_refused_by_name(engine, prediction, field):
    r = _chat(engine, prediction=prediction)
    assert r.status_code == 422 and r.json()["error"]["param"] == field, r.text
    assert engine.requests == []


def test_a_backend_that_verifies_no_guesses_refuses_it_by_name():
    r = _chat(FakeEngine(verifies_drafts=False), prediction={"type": "content", "content": "x"})
    assert r.status_code == 422 and r.json()["error"]["param"] == "prediction", r.text
    assert "send the request without it" in r.json()["error"]["message"]


def test_usage_sums_the_choices_counts():
    def last(accepted: int, rejected: int) -> TokenEvent:
        return TokenEvent(
            "r", 3, 1, "a", "a", None, False, finish_reason=FinishReason.LENGTH,
            num_accepted_prediction_tokens=accepted, num_rejected_prediction_tokens=rejected,
        )  # fmt: skip

    counts = [prediction_counts(last(5, 2)), prediction_counts(last(7, 0))]
    assert prediction_usage(counts) == {"accepted_prediction_tokens": 12, "rejected_prediction_tokens": 2}
