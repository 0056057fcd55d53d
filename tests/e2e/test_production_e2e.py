"""Issue 21 on a real `tgi launch` of the default model, started with `--otlp-endpoint` to a real OTLP/HTTP
receiver on loopback: 128-token generations of 6 prompts with `watermark: true` give a detector z-score above
4 (measured 6.0 to 8.9; 8.1 to 10.7 at 200 tokens: z grows as the square root of the length), the same
requests without it below 2 on average (each below 4); every request is a trace with its four children."""

from __future__ import annotations

import io
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from otlp_receiver import OtlpReceiver

from tgi.core.loading import resolve_model
from tgi.core.tokenization import load_tokenizer
from tgi.core.watermark import detect_text
from tgi.server.cli.main import main

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle works.",
    "The history of the printing press",
    "My favourite recipe for a rainy day is",
    "Describe the city of Lisbon to a visitor.",
    "Once upon a time in a distant galaxy,",
]
N = 128


@pytest.fixture(scope="module")
def receiver():
    with OtlpReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def wm_server(launch_server, stop_server, tmp_path_factory, receiver):
    flags = ["--max-concurrent-requests", "24", "--otlp-endpoint", receiver.endpoint + "/v1/traces"]
    s = launch_server(tmp_path_factory.mktemp("wm"), *flags, "--otlp-service-name", "tgi-e2e")
    yield s
    stop_server(s)


def _full_generation(url: str, prompt: str, watermark: bool) -> tuple[str, int]:
    """A sampled generation of `N` tokens (TGI's routes have no `ignore_eos`: a draw that ends at EOS
    sooner is not one, and the next seed is tried), and the seed that gave it."""
    for seed in range(1, 8):
        body = {
            "inputs": prompt,
            "parameters": {"max_new_tokens": N, "seed": seed, "do_sample": True, "watermark": watermark},
        }
        body["parameters"]["details"] = True
        r = httpx.post(url + "/generate", json=body, timeout=600)
        assert r.status_code == 200, r.text
        if r.json()["details"]["generated_tokens"] == N:
            return r.json()["generated_text"], seed
    raise AssertionError(f"no {N}-token generation for {prompt!r} in 7 seeds")


def test_watermarked_text_is_detected_and_plain_text_is_not(wm_server, capsys, monkeypatch):
    tokenizer = load_tokenizer(resolve_model(None))
    jobs = [(p, mark) for mark in (True, False) for p in PROMPTS]  # N tokens each
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda j: _full_generation(wm_server.url, *j), jobs))
    texts = [t for t, _ in results]
    scores = [detect_text(t, tokenizer) for t in texts]
    marked, plain = scores[: len(PROMPTS)], scores[len(PROMPTS) :]
    with capsys.disabled():
        print("\nwatermarked z:", [round(s.z_score, 2) for s in marked])
        print("plain z:", [round(s.z_score, 2) for s in plain])
        print("seeds:", [n for _, n in results])
    assert all(s.z_score > 4 for s in marked), marked
    # unwatermarked text scores N(0, 1): one prompt in 44 is above 2 by chance, so the 6 are held to a mean
    # below 2 (its deviation is 0.41: 4.9 deviations of margin) and each to the detection threshold
    assert sum(s.z_score for s in plain) / len(plain) < 2 and all(s.z_score < 4 for s in plain), plain
    # the command gives the function's answer (its code in this process: no new interpreter to import)
    monkeypatch.setattr(sys, "stdin", io.StringIO(texts[0]))
    capsys.readouterr()
    assert main(["watermark", "detect"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out.splitlines()[-1])["z_score"] == pytest.approx(marked[0].z_score)


def test_requests_are_traced_to_the_otlp_receiver(wm_server, receiver):
    trace_id, client_span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    headers = {"traceparent": f"00-{trace_id}-{client_span}-01"}
    body = {"inputs": "The capital of France is", "parameters": {"max_new_tokens": 8}}
    assert httpx.post(wm_server.url + "/generate", json=body, headers=headers, timeout=120).status_code == 200
    deadline = time.monotonic() + 30  # the batch processor exports every 5 s
    while time.monotonic() < deadline:
        spans = [s for s in receiver.spans() if s.trace_id.hex() == trace_id]
        if len(spans) == 5:
            break
        time.sleep(0.5)
    root = next(s for s in spans if s.name == "generate")
    assert root.parent_span_id.hex() == client_span and "tgi-e2e" in receiver.service_names
    children = sorted(
        (s for s in spans if s.parent_span_id == root.span_id), key=lambda s: s.start_time_unix_nano
    )
    assert [s.name for s in children] == ["validation", "queue", "prefill", "decode"]
    assert all(s.end_time_unix_nano > s.start_time_unix_nano for s in children[2:])  # real model time
