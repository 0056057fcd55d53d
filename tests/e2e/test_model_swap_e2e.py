"""Swapping the served model on a real `tgi launch` (default model) while requests stream continuously:
none fails, those admitted before the swap finish on the old model (its text), later ones run on the new
one, `/info` names it; a model that does not fit beside the served one is refused with the reason. Only the
admin key swaps (`--admin-api-key`, with `--enable-model-swap`; the inference key is a 401), only models of
`--swappable-models`, and no refusal echoes a path."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tgi.core.testing.tiny_models import save_random_model

KEY = "swap-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
ADMIN_KEY = "swap-admin-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
PROMPT = "The capital of France is"
N = 24


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The folder of the models the server may swap to: `tiny` and `huge` (written by the tests)."""
    return tmp_path_factory.mktemp("swappable")


@pytest.fixture(scope="module")
def swap_server(launch_server, stop_server, tmp_path_factory, models):
    swappable = ",".join(str(models / name) for name in ("tiny", "huge", "missing"))
    s = launch_server(
        tmp_path_factory.mktemp("swap"), "--api-key", KEY, "--max-concurrent-requests", "16",
        "--admin-api-key", ADMIN_KEY, "--enable-model-swap", "--swappable-models", swappable,
        "--dtype", "float32",  # texts of concurrent streams are compared: no bfloat16 near-tie to tip
    )  # fmt: skip
    yield s
    stop_server(s)


def _stream(url: str) -> tuple[float, str]:
    """One greedy streamed request: (when it was sent, its text); raises unless it ends with its text."""
    sent = time.monotonic()
    body = {"inputs": PROMPT, "parameters": {"max_new_tokens": N}}
    with httpx.stream("POST", url + "/generate_stream", json=body, headers=AUTH, timeout=300) as r:
        assert r.status_code == 200, r.read()
        events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
    assert events and events[-1]["generated_text"] is not None, events
    return sent, events[-1]["generated_text"]


def test_swap_while_streaming(swap_server, models):
    url = swap_server.url
    old_text = _stream(url)[1]
    new_model = save_random_model(models / "tiny", max_position_embeddings=4096, init_std=0.5)
    refused = httpx.post(url + "/admin/model", json={"model_id": str(new_model)}, headers=AUTH, timeout=60)
    assert refused.status_code == 401  # the inference key never swaps
    results, errors, stop = [], [], threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                results.append(_stream(url))
            except Exception as exc:  # every failure is reported below
                errors.append(repr(exc))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(2)  # requests in flight on the old model
    before = time.monotonic()
    r = httpx.post(url + "/admin/model", json={"model_id": str(new_model)}, headers=ADMIN, timeout=300)
    after = time.monotonic()
    assert r.status_code == 200, r.text
    assert r.json()["model_id"] == str(new_model) and r.json()["draining_requests"] >= 0
    deadline = time.monotonic() + 120  # requests on the new model: waited for, not timed (a liveness bound)
    while not any(sent > after for sent, _ in results) and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    old_ones = [text for sent, text in results if sent < before]
    new_ones = [text for sent, text in results if sent > after]
    assert old_ones and all(text == old_text for text in old_ones)  # finished on the old model
    assert new_ones and all(text != old_text for text in new_ones)  # the random model's words
    assert len(set(new_ones)) == 1  # greedy: the same text every time
    assert httpx.get(url + "/info", headers=AUTH).json()["model_id"] == str(new_model)
    assert httpx.get(url + "/health").status_code == 200


def test_a_model_that_does_not_fit_is_refused_with_the_reason(swap_server, models):
    huge = models / "huge"
    huge.mkdir()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 16384,
        "intermediate_size": 53248,
        "num_hidden_layers": 126,
        "num_attention_heads": 128,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
    }  # Llama 3.1 405B's shape: no weights needed, the refusal comes before any loading
    (huge / "config.json").write_text(json.dumps(config))
    (huge / "model.safetensors").write_bytes(len(b"{}").to_bytes(8, "little") + b"{}")  # no tensors
    r = httpx.post(swap_server.url + "/admin/model", json={"model_id": str(huge)}, headers=ADMIN, timeout=120)
    assert r.status_code == 507, r.text
    assert "does not fit beside" in r.json()["error"] and "GiB" in r.json()["error"]
    assert str(models) not in r.text  # no path in the answer
    unauthorised = httpx.post(swap_server.url + "/admin/model", json={"model_id": str(huge)}, timeout=120)
    assert unauthorised.status_code == 401
    with_inference_key = httpx.post(
        swap_server.url + "/admin/model", json={"model_id": str(huge)}, headers=AUTH, timeout=120
    )
    assert with_inference_key.status_code == 401


def test_refusals_name_no_path(swap_server, models, tmp_path):
    url = swap_server.url + "/admin/model"
    outside = tmp_path / "elsewhere"
    r = httpx.post(url, json={"model_id": str(outside)}, headers=ADMIN, timeout=60)
    assert r.status_code == 403 and "--swappable-models" in r.json()["error"] and str(tmp_path) not in r.text
    missing = models / "missing"  # allowed, but there is no such model: a 422 with a request id, no path
    r = httpx.post(url, json={"model_id": str(missing)}, headers=ADMIN, timeout=60)
    assert r.status_code == 422 and "request id" in r.json()["error"], r.text
    assert str(models) not in r.text and "missing" not in r.text and "Error" not in r.text
    assert "missing" in swap_server.logs()  # the detail is in the log
