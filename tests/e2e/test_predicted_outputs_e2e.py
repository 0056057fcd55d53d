"""OpenAI's Predicted Outputs (`prediction`) through the official `openai` client against the shared server
(the default model, float32, greedy: no near-tie a verification step could tip): the answer is the one given
without a prediction, and usage counts the prediction's accepted and rejected tokens, streamed too."""

from __future__ import annotations

import openai
import pytest

pytestmark = pytest.mark.e2e

# an answer that copies its input: its top choices are far apart at every token
MESSAGES = [
    {
        "role": "user",
        "content": "Copy this code exactly, and nothing else:\n"
        "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n",
    }
]
MAX_TOKENS = 60


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="-", timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def plain(client):
    """The answer without a prediction."""
    return _chat(client)


def _chat(client, **extra):
    return client.chat.completions.create(
        model="tgi", messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0, **extra
    )


def _predicting(text) -> dict:
    return {"prediction": {"type": "content", "content": text}}


def test_the_answer_as_its_own_prediction_is_accepted_whole(client, plain):
    text = plain.choices[0].message.content
    assert plain.usage.completion_tokens_details is None  # no prediction, no counts of one
    out = _chat(client, **_predicting(text))
    assert out.choices[0].message.content == text
    assert out.usage.completion_tokens == plain.usage.completion_tokens
    details = out.usage.completion_tokens_details
    # every token of the answer but its end-of-turn token (no text, so not in the prediction) was predicted
    said = plain.usage.completion_tokens - (plain.choices[0].finish_reason == "stop")
    assert details.accepted_prediction_tokens == said > 10
    assert details.rejected_prediction_tokens == 0


def test_an_edited_prediction_keeps_the_answer_and_counts_what_it_cost(client, plain):
    text = plain.choices[0].message.content
    edited = text.replace("a - b", "b - a").replace("sub", "subtract")  # the model says otherwise
    assert edited != text
    out = _chat(
        client, **_predicting([{"type": "text", "text": edited[:20]}, {"type": "text", "text": edited[20:]}])
    )
    assert out.choices[0].message.content == text
    details = out.usage.completion_tokens_details
    assert 0 < details.accepted_prediction_tokens < plain.usage.completion_tokens
    assert details.rejected_prediction_tokens > 0  # the guesses past each edit, fed and refused


def test_streamed_usage_counts_the_prediction(client, plain):
    text = plain.choices[0].message.content
    chunks = list(_chat(client, stream=True, stream_options={"include_usage": True}, **_predicting(text)))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    usage = chunks[-1].usage
    said = plain.usage.completion_tokens - (plain.choices[0].finish_reason == "stop")
    assert usage.completion_tokens_details.accepted_prediction_tokens == said
    assert usage.completion_tokens_details.rejected_prediction_tokens == 0


def test_an_empty_prediction_changes_nothing(client, plain):
    out = _chat(client, **_predicting(""))
    assert out.choices[0].message.content == plain.choices[0].message.content


@pytest.mark.parametrize(
    ("create", "field"),
    [
        (lambda c: _chat(c, prediction={"type": "audio", "content": "x"}), "prediction.type"),
        (
            lambda c: _chat(c, **_predicting([{"type": "image_url", "text": "x"}])),
            "prediction.content[0].type",
        ),
        (
            lambda c: c.completions.create(
                model="tgi", prompt="Hi", max_tokens=4, extra_body=_predicting("x")
            ),
            "prediction",
        ),
    ],
    ids=["not-content", "not-text", "on-completions"],
)
def test_what_is_not_a_content_prediction_on_chat_is_refused_by_name(client, create, field):
    with pytest.raises(openai.UnprocessableEntityError) as info:
        create(client)
    assert f"`{field}`" in str(info.value)
