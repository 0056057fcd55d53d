"""Real server, official clients: what a request may ask for has a cap that is checked at once (`logit_bias`,
`stop_token_ids`), and a huge `/tokenize` body is refused by its length while the streams of others go on
(how long they pause meanwhile: `tgi benchmark stall`)."""

from __future__ import annotations

import httpx
import pytest

from fake_engine import error_of
from tgi.benchmarks.stall_bench import stream_gaps

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def openai_client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)


def test_a_logit_bias_of_the_whole_vocabulary_is_refused_at_once(openai_client):
    from openai import UnprocessableEntityError

    bias = {
        str(t): -1 for t in range(50_000)
    }  # more than the vocabulary (49,152): each step would pay for it
    with pytest.raises(UnprocessableEntityError) as refused:
        openai_client.completions.create(model="tgi", prompt="Hi", max_tokens=2, logit_bias=bias)
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


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/tokenize", lambda text: {"inputs": text}),
        ("/chat_tokenize", lambda text: {"messages": [{"role": "user", "content": text}]}),
    ],
)
def test_a_megabyte_to_tokenize_is_refused_beside_a_stream_that_completes(server, route, body):
    """The property: the body is refused by its length and the stream beside it goes on past it. How long
    that stream pauses meanwhile is a measurement (`tgi benchmark stall`, src/tgi/benchmarks/README.md), not a bar
    here: a gap timed against a fixed bar is decided by whatever else the machine is doing."""
    text = "hello " * 175_000  # 1 MB, 175,000 tokens: past --max-input-tokens (1023)

    def post():
        return httpx.post(server.url + route, json=body(text), timeout=120)

    # raises if the stream ended before the body's answer; read until 3 tokens came after it
    gaps, r = stream_gaps(server.url, 1000, post, tail=3)
    assert gaps, "no token of the stream arrived while the body was handled"
    assert r.status_code == 422, r.text[:300]
    message, kind = error_of(r, route)
    assert kind == "validation" and "`inputs` must have less than 1023 tokens. Given: 1750" in message
    fits = httpx.post(server.url + "/tokenize", json={"inputs": " ".join(["hello"] * 100)}, timeout=30)
    assert fits.status_code == 200 and len(fits.json()) == 100
