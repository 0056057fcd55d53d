"""LoRA adapters loaded and unloaded at run time through a real `tgi launch --allow-runtime-lora-updating` (a
tiny random Llama started without adapters, adapters made with `peft`): `POST /v1/load_lora_adapter` serves an
adapter that the official `openai` client then selects by `model` (/v1/models lists it) with transformers +
peft's greedy tokens; an adapter of another model is a 400 naming the reason, in OpenAI's error shape; an
unload while a stream of the adapter runs refuses new requests of it at once (OpenAI's 404
`model_not_found`), lets the stream finish with its adapter, and answers after it; unloading an unknown id is
a 404; a server started without the flag refuses both routes with a 403 naming it. The routes take only the
admin key (`--admin-api-key`); a `lora_path` outside `--lora-root` is a 403 that does not echo it, and an
adapter above `--max-lora-rank` a 400 naming the flag."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from tgi.core.testing.lora import peft_greedy, write_random_lora
from tgi.core.testing.model import VOCAB_SIZE
from tgi.core.testing.tiny_models import save_random_model

PROMPT = "a b c d e f g"
N = 6
ADMIN_KEY = "lora-admin-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="module")
def runtime_server(tmp_path_factory, launch_server, stop_server):
    root = tmp_path_factory.mktemp("lora-runtime-e2e")
    # the conformance suite's tiny Llama with a longer context: a stream long enough to unload beside
    base = save_random_model(
        root / "base", "llama", vocab_size=VOCAB_SIZE, num_heads=4, num_kv_heads=2, max_position_embeddings=2048,
        init_std=0.08,
    )  # fmt: skip
    server = launch_server(
        root, "--model-id", str(base), "--backend", "cpu", "--dtype", "float32", "--max-total-tokens", "2048",
        "--allow-runtime-lora-updating", "--admin-api-key", ADMIN_KEY, "--lora-root", str(root),
        "--max-lora-rank", "8",
    )  # fmt: skip
    yield server, base, root
    assert stop_server(server) == 0, server.logs()


def _load(url: str, name: str, path, headers=ADMIN) -> httpx.Response:
    return httpx.post(
        url + "/v1/load_lora_adapter",
        json={"lora_name": name, "lora_path": str(path)},
        headers=headers,
        timeout=60,
    )


def _unload(url: str, name: str, headers=ADMIN) -> httpx.Response:
    return httpx.post(url + "/v1/unload_lora_adapter", json={"lora_name": name}, headers=headers, timeout=60)


def test_load_select_refuse(runtime_server):
    server, base, root = runtime_server
    alpha = write_random_lora(root / "alpha", base, seed=31)
    r = _load(server.url, "alpha", alpha)
    assert r.status_code == 200, r.text
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    assert [m.id for m in client.models.list()][1:] == ["alpha"]
    ids = [t["id"] for t in httpx.post(server.url + "/tokenize", json={"inputs": PROMPT}).json()]
    out = httpx.post(
        server.url + "/generate",
        json={"inputs": PROMPT, "parameters": {"max_new_tokens": N, "details": True, "adapter_id": "alpha"}},
    ).json()
    assert [t["id"] for t in out["details"]["tokens"]] == peft_greedy(base, alpha, [ids], N)[0]
    chosen = client.completions.create(model="alpha", prompt=PROMPT, max_tokens=N, temperature=0)
    assert chosen.choices[0].text == out["generated_text"] and chosen.model == "alpha"

    again = _load(server.url, "alpha", alpha)
    assert again.status_code == 400 and "loaded already" in again.json()["error"]["message"]
    other = save_random_model(root / "other", "llama", hidden_size=32, intermediate_size=64, num_heads=4)
    wrong = _load(server.url, "wrong", write_random_lora(root / "wrong", other, seed=4))
    error = wrong.json()["error"]
    assert wrong.status_code == 400 and "trained for another model" in error["message"]
    assert error["type"] == "invalid_request_error" and error["param"] == "lora_path"
    assert [m.id for m in client.models.list()][1:] == ["alpha"]
    inplace = httpx.post(
        server.url + "/v1/load_lora_adapter",
        json={"lora_name": "alpha", "lora_path": str(alpha), "load_inplace": True},
        headers=ADMIN,
    )
    assert inplace.status_code == 422 and "load_inplace" in inplace.json()["error"]["message"]
    missing = _unload(server.url, "nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_unload_waits_for_the_requests_of_the_adapter(runtime_server):
    server, base, root = runtime_server
    beta = write_random_lora(root / "beta", base, r=4, target_modules=("q_proj", "down_proj"), seed=32)
    assert _load(server.url, "beta", beta).status_code == 200
    long = 1500  # decode steps the stream runs for (a few seconds)
    body = {"inputs": PROMPT, "parameters": {"max_new_tokens": long, "adapter_id": "beta", "details": True}}
    reference = httpx.post(server.url + "/generate", json=body, timeout=120).json()
    want = [t["id"] for t in reference["details"]["tokens"]]
    tokens, answer, started = [], {}, threading.Event()

    def stream() -> None:
        with httpx.stream("POST", server.url + "/generate_stream", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    tokens.append(json.loads(line[5:])["token"]["id"])
                    started.set()

    def unload() -> None:
        answer["status"] = _unload(server.url, "beta").status_code
        # how far the stream had come when the unload answered: the order of the two, read from the events
        # (an unload that did not wait would answer with ~all of the stream's tokens still to come; the
        # client's own lag behind its socket is a few tokens, not half of them)
        answer["tokens_by_then"] = len(tokens)

    streaming = threading.Thread(target=stream)
    streaming.start()
    assert started.wait(60)
    unloading = threading.Thread(target=unload)
    unloading.start()
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    deadline = time.monotonic() + 30
    while "beta" in [m.id for m in client.models.list()] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "beta" not in [m.id for m in client.models.list()]  # retired at once
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="beta", prompt=PROMPT, max_tokens=2)
    assert info.value.body["code"] == "model_not_found"
    assert streaming.is_alive() and unloading.is_alive(), (
        "the stream ended before the unload was seen waiting"
    )
    streaming.join(120)
    unloading.join(120)
    assert tokens == want  # the stream kept its adapter to its last token (its tokens are those of before)
    assert answer["status"] == 200 and answer["tokens_by_then"] >= long // 2, answer
    assert _unload(server.url, "beta").status_code == 404
    r = httpx.post(server.url + "/generate", json={"inputs": PROMPT, "parameters": {"adapter_id": "beta"}})
    assert r.status_code == 422
    # with no adapter left, a name that was one is still no model of this server (not the base model)
    assert _unload(server.url, "alpha").status_code in (200, 404)  # loaded by the test above, when it ran
    assert [m.id for m in client.models.list()][1:] == []
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="beta", prompt=PROMPT, max_tokens=2)


def test_only_the_admin_key_loads_and_only_from_under_the_root(runtime_server, tmp_path):
    server, base, root = runtime_server
    gamma = write_random_lora(root / "gamma", base, seed=33)
    for headers in ({}, {"Authorization": "Bearer nope"}):
        assert _load(server.url, "gamma", gamma, headers).status_code == 401
        assert _unload(server.url, "gamma", headers).status_code == 401
    outside = write_random_lora(tmp_path / "outside", base, seed=34)  # a valid adapter, outside the root
    (root / "link").symlink_to(outside)  # inside by name only
    for path in (outside, root / "link", "/etc", root / ".." / "x"):
        r = _load(server.url, "sneaky", path)
        assert r.status_code == 403 and "--lora-root" in r.json()["error"]["message"], r.text
        assert str(tmp_path) not in r.text and str(path) not in r.text
    missing = _load(server.url, "missing", root / "nowhere")  # inside, but no adapter there: no path said
    assert missing.status_code == 400 and "request id" in missing.json()["error"]["message"]
    assert str(root) not in missing.text and "nowhere" not in missing.text
    wide = _load(server.url, "wide", write_random_lora(root / "wide", base, r=16, seed=35))
    assert wide.status_code == 400 and "--max-lora-rank 8" in wide.json()["error"]["message"], wide.text
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    assert not {"sneaky", "missing", "wide"} & {m.id for m in client.models.list()}


def test_routes_are_off_without_the_flag(server):
    for route, body in (("load", {"lora_name": "a", "lora_path": "/tmp"}), ("unload", {"lora_name": "a"})):
        r = httpx.post(f"{server.url}/v1/{route}_lora_adapter", json=body)
        assert r.status_code == 403 and "--allow-runtime-lora-updating" in r.json()["error"]["message"]
