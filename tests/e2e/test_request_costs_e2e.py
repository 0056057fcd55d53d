"""Real server, official clients: what a request may ask for has a cap that is checked at once (`logit_bias`,
`stop_token_ids`), and a huge `/tokenize` body never stalls the streams of others."""

from __future__ import annotations

import itertools
import threading
import time

import httpx
import pytest

from fake_engine import error_of

pytestmark = pytest.mark.e2e

#: the longest pause between two streamed tokens allowed while another client posts a huge body
MAX_GAP_S = 0.2


@pytest.fixture(scope="module")
def openai_client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)


def test_a_logit_bias_of_the_whole_vocabulary_is_refused_at_once(openai_client):
    from openai import UnprocessableEntityError

    bias = {
        str(t): -1 for t in range(50_000)
    }  # more than the vocabulary (49,152): each step would pay for it
    start = time.monotonic()
    with pytest.raises(UnprocessableEntityError) as refused:
        openai_client.completions.create(model="tgi", prompt="Hi", max_tokens=2, logit_bias=bias)
    assert time.monotonic() - start < 2
    assert "`logit_bias` may name at most 300 tokens. Given: 50000" in refused.value.message
    assert refused.value.body["param"] == "logit_bias"
    # the cap itself is served
    out = openai_client.completions.create(
        model="tgi", prompt="Hi", max_tokens=2, logit_bias={str(t): -1 for t in range(300)}
    )
    assert out.choices[0].text


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (list(range(301)), "`stop_token_ids` may hold at most 300 token ids. Given: 301"),
        ([2, 49_152], "`stop_token_ids` must be in [0, 49152)"),
    ],
)
def test_stop_token_ids_past_the_cap_or_the_vocabulary_are_refused(openai_client, ids, message):
    from openai import UnprocessableEntityError

    with pytest.raises(UnprocessableEntityError) as refused:
        openai_client.completions.create(
            model="tgi", prompt="Hi", max_tokens=2, extra_body={"stop_token_ids": ids}
        )
    assert message in refused.value.message


def _stream_gaps(openai_client, during) -> tuple[list[float], object]:
    """Stream a long completion; after its 5th token, run `during()` in a thread. Returns the gaps between
    tokens streamed while it ran, and what it returned."""
    stream = openai_client.completions.create(
        model="tgi",
        prompt="Once upon a time",
        max_tokens=400,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    result, arrivals, window = {}, [], []
    worker = threading.Thread(target=lambda: result.setdefault("r", during()))
    for chunk in stream:
        arrivals.append(time.monotonic())
        if len(arrivals) == 5:
            window.append(time.monotonic())
            worker.start()
        elif len(arrivals) > 5 and not worker.is_alive() and len(window) == 1:
            window.append(time.monotonic())  # a token after it ended: the whole window is measured
        if len(window) == 2 and arrivals[-1] - window[1] > 1.0:
            break
        assert chunk.choices
    stream.close()
    worker.join(60)
    assert len(window) == 2, "the stream ended before the request it ran beside"
    gaps = [b - a for a, b in itertools.pairwise(arrivals) if window[0] <= b and a <= window[1]]
    return gaps, result["r"]


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/tokenize", lambda text: {"inputs": text}),
        ("/chat_tokenize", lambda text: {"messages": [{"role": "user", "content": text}]}),
    ],
)
def test_a_megabyte_to_tokenize_does_not_stall_a_stream(server, openai_client, route, body):
    text = "hello " * 175_000  # 1 MB, 175,000 tokens: past --max-input-tokens (1023)

    def post():
        return httpx.post(server.url + route, json=body(text), timeout=120)

    gaps, r = _stream_gaps(openai_client, post)
    assert gaps and max(gaps) < MAX_GAP_S, f"the stream stalled {max(gaps) * 1000:.0f} ms"
    assert r.status_code == 422, r.text[:300]
    message, kind = error_of(r, route)
    assert kind == "validation" and "`inputs` must have less than 1023 tokens. Given: 1750" in message
    fits = httpx.post(server.url + "/tokenize", json={"inputs": " ".join(["hello"] * 100)}, timeout=30)
    assert fits.status_code == 200 and len(fits.json()) == 100
