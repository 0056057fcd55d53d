"""Official clients against a real server: greedy text through every route equals the engine's own."""

from __future__ import annotations

import asyncio
import tempfile

import pytest
from e2e_server import SHARED_REFERENCE, launch, reference_for, stop

pytestmark = pytest.mark.e2e

PROMPT = "The capital of France is"
N = 10  # new tokens: past the chat answer's end (8 tokens with its EOS), enough for a stop sequence
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def local_hub(monkeypatch):
    """tests/conftest.py sets HF_HUB_OFFLINE (no hub); InferenceClient talks to our local server only."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(
    scope="module",
    params=[1, 3, "tpu"],
    ids=["1-shard", "3-shards", "tpu-jax-cpu"],
)
def deployment(request, tmp_path_factory):
    """The served API must not change with tensor parallelism or the backend: every test here runs against
    the shared single-process server, against `--num-shard 3` (the default model's 9 query / 3 KV heads split
    in 3), and against the TPU backend (JAX) on a JAX CPU device (`TGI_JAX_PLATFORM=cpu`; no TPU here; its
    `--num-shard 3` is tests/integration/test_tpu_engine.py's). The sharded runs use float32, where neither
    the all-reduce order, the prefix cache nor the step's thread count can flip a greedy choice, against a
    float32 reference (the torch CPU engine's); the shared server is `--deterministic`, against a reference
    with its settings (tests/e2e/conftest.py).
    The tests marked `ROUTES_ON_ONE_SHARD` check what a route or client adds over another that reaches the
    same engine call (the async client, huggingface_hub's, completions, the raw routes): the route layer is
    the same code whatever serves behind it, so they run against the single-process server only."""
    if request.param == 1:
        yield request.getfixturevalue("shared_server"), reference_for(**SHARED_REFERENCE), request.param
        return
    flags, env = ["--num-shard", "3", "--dtype", "float32"], None
    if request.param == "tpu":
        # small limits: few shapes to compile at start-up, the same as tests/integration/test_tpu_engine.py's
        # (whose executables are then found in the persistent compilation cache, and the other way round)
        flags = ["--backend", "tpu", "--dtype", "float32", "--max-total-tokens", "256"]
        flags += [
            "--max-batch-prefill-tokens",
            "64",
            "--max-batch-total-tokens",
            "2048",
            "--max-batch-size",
            "4",
        ]
        env = {
            "TGI_PLUGINS": "cpu,tpu",  # tests/conftest.py loads only the cpu plugin unless told
            "TGI_JAX_PLATFORM": "cpu",
            "TGI_JAX_CACHE_DIR": tempfile.gettempdir() + "/tgi-tests-jax-cache",
        }
    sharded = launch(tmp_path_factory.mktemp("e2e-sharded"), *flags, env=env)
    try:
        yield sharded, reference_for("float32"), request.param
    finally:
        assert stop(sharded) == 0, sharded.logs()


#: a test of the route layer: run against the single-process deployment only (see `deployment`)
ROUTES_ON_ONE_SHARD = pytest.mark.parametrize("deployment", [1], ids=["1-shard"], indirect=True)


@pytest.fixture(scope="module")
def server(deployment):
    return deployment[0]


@pytest.fixture(scope="module")
def reference(deployment):
    return deployment[1]


@pytest.fixture(scope="module")
def expected(reference):
    return reference(PROMPT, N)


@pytest.fixture(scope="module")
def expected_chat(reference):
    tok = reference.tokenizer
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    return reference(tok.encode(text, add_special_tokens=False), N)


def test_text_generation_client(server, expected):
    from text_generation import Client

    client = Client(server.url, timeout=120)
    response = client.generate(PROMPT, max_new_tokens=N)
    assert response.generated_text == expected
    assert response.details.generated_tokens == N and len(response.details.tokens) == N
    assert response.details.finish_reason.value == "length"
    streamed = list(client.generate_stream(PROMPT, max_new_tokens=N))
    assert "".join(r.token.text for r in streamed if not r.token.special) == expected
    assert streamed[-1].generated_text == expected and streamed[-1].details.generated_tokens == N
    assert all(r.details is None for r in streamed[:-1])


@ROUTES_ON_ONE_SHARD
def test_text_generation_async_client(server, expected):
    from text_generation import AsyncClient

    async def run():
        client = AsyncClient(server.url, timeout=120)
        response = await client.generate(PROMPT, max_new_tokens=N)
        streamed = [r async for r in client.generate_stream(PROMPT, max_new_tokens=N)]
        return response, streamed

    response, streamed = asyncio.run(run())
    assert response.generated_text == expected
    assert streamed[-1].generated_text == expected
    assert "".join(r.token.text for r in streamed if not r.token.special) == expected


@ROUTES_ON_ONE_SHARD
def test_huggingface_hub_text_generation(server, expected, local_hub):
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=server.url, timeout=120)
    assert client.text_generation(PROMPT, max_new_tokens=N) == expected
    detailed = client.text_generation(PROMPT, max_new_tokens=N, details=True)
    assert detailed.generated_text == expected and detailed.details.generated_tokens == N
    assert "".join(client.text_generation(PROMPT, max_new_tokens=N, stream=True)) == expected
    events = list(client.text_generation(PROMPT, max_new_tokens=N, stream=True, details=True))
    assert events[-1].generated_text == expected


@ROUTES_ON_ONE_SHARD
def test_huggingface_hub_chat_completion(server, expected_chat, local_hub):
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=server.url, timeout=120)
    out = client.chat_completion(MESSAGES, max_tokens=N, temperature=0)
    assert out.choices[0].message.content == expected_chat
    chunks = list(client.chat_completion(MESSAGES, max_tokens=N, temperature=0, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected_chat


def test_openai_chat_completions(server, expected_chat):
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    out = client.chat.completions.create(model="tgi", messages=MESSAGES, max_tokens=N, temperature=0)
    assert out.choices[0].message.content == expected_chat
    used = out.usage.completion_tokens
    assert 0 < used <= N and out.choices[0].finish_reason == ("length" if used == N else "stop")
    stream = client.chat.completions.create(
        model="tgi",
        messages=MESSAGES,
        max_tokens=N,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected_chat
    assert chunks[-1].usage.completion_tokens == used


@ROUTES_ON_ONE_SHARD
def test_openai_completions(server, expected):
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    out = client.completions.create(model="tgi", prompt=PROMPT, max_tokens=N, temperature=0)
    assert out.choices[0].text == expected
    chunks = list(
        client.completions.create(model="tgi", prompt=PROMPT, max_tokens=N, temperature=0, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == expected
    ignored = client.completions.create(
        model="tgi", prompt=PROMPT, max_tokens=N, temperature=0, extra_body={"ignore_eos": True}
    )
    assert ignored.usage.completion_tokens == N
    assert [m.id for m in client.models.list().data]


@ROUTES_ON_ONE_SHARD
def test_raw_routes_match(server, expected):
    import httpx

    body = {"inputs": PROMPT, "parameters": {"max_new_tokens": N}}
    assert httpx.post(server.url + "/generate", json=body, timeout=120).json()["generated_text"] == expected
    assert httpx.post(server.url + "/", json=body, timeout=120).json()[0]["generated_text"] == expected


def test_stop_sequences_as_each_api_returns_them(server, expected):
    """TGI keeps the matched stop sequence in `generated_text`; OpenAI's API trims it."""
    from openai import OpenAI
    from text_generation import Client

    stop = expected.split()[1]  # a word the greedy text surely reaches
    at = expected.index(stop)
    response = Client(server.url, timeout=120).generate(PROMPT, max_new_tokens=N, stop_sequences=[stop])
    assert response.details.finish_reason.value == "stop_sequence"
    assert response.generated_text == expected[: at + len(stop)]
    client = OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    out = client.completions.create(model="tgi", prompt=PROMPT, max_tokens=N, temperature=0, stop=[stop])
    assert out.choices[0].text == expected[:at] and out.choices[0].finish_reason == "stop"


def test_openai_client_reads_our_refusals(server, deployment):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    with pytest.raises(openai.UnprocessableEntityError) as refused:  # audio output: not served here
        client.chat.completions.create(
            model="tgi", messages=MESSAGES, max_tokens=2, modalities=["text", "audio"]
        )
    assert refused.value.status_code == 422 and "`modalities`" in refused.value.message
    assert (
        refused.value.body["param"] == "modalities" and refused.value.body["type"] == "invalid_request_error"
    )
    if (
        deployment[2] == "tpu"
    ):  # its runner verifies no guesses: Predicted Outputs refused by the engine, by name
        predicted = {"type": "content", "content": "Paris"}
        with pytest.raises(openai.UnprocessableEntityError) as refused:
            client.chat.completions.create(model="tgi", messages=MESSAGES, max_tokens=2, prediction=predicted)
        assert refused.value.body["param"] == "prediction" and "`prediction`" in refused.value.message


def test_info_names_the_backend_and_where_it_runs(server, deployment):
    import httpx

    info = httpx.get(server.url + "/info").json()
    if deployment[2] == "tpu":  # JAX on CPU devices says so, here and at start-up
        assert info["backend"] == "tpu"
        assert "TGI_JAX_PLATFORM=cpu: not a TPU" in info["kernels"]["platform"]
        assert "TGI_JAX_PLATFORM=cpu: not a TPU" in server.logs()
    else:
        assert info["backend"] == "cpu"
