"""Two `tgi launch` replicas behind vLLM's router (`vllm-router`, the PyPI wheel of vllm-project/router) with
its `cache_aware` policy, all on loopback: the router finds the replicas healthy (`/health`), forwards OpenAI
chat requests, and keeps each conversation on the replica that holds its prefix, so the later turns of three
conversations with a ~1,000-token system prompt each read at least 512 prompt tokens from the prefix cache.
One router and two replicas for the module (the default model, float32)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from e2e_server import free_port

REPLICA_FLAGS = ("--dtype", "float32", "--max-total-tokens", "2048")
TOPICS = ("a lighthouse keeper", "a night-train conductor", "an alpine beekeeper")


@pytest.fixture(scope="module")
def router(launch_server, stop_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-router-e2e")
    binary = shutil.which("vllm-router", path=str(Path(sys.executable).parent))  # the venv's
    assert binary, "vllm-router is not installed (the dev extra's `vllm-router`)"
    with ThreadPoolExecutor(2) as pool:  # the two start at once (each waits for its own /health)
        replicas = list(pool.map(lambda _: launch_server(root, *REPLICA_FLAGS), range(2)))
    port = free_port()
    log = (root / "router.log").open("w")
    cmd = [
        binary, "--host", "127.0.0.1", "--port", str(port), "--policy", "cache_aware",
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
        "--worker-urls", *[r.url for r in replicas],
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, (root / "router.log").read_text()
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("the router did not answer /health:\n" + (root / "router.log").read_text())
        yield url, replicas
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        for r in replicas:
            assert stop_server(r) == 0, r.logs()


def _system(topic: str) -> str:
    rule = f"You are {topic}. Answer in one short sentence, in character, and never break the role. "
    return rule * 46  # about 1,000 tokens of the default model's tokenizer


def test_later_turns_read_the_shared_prefix_from_the_cache(router) -> None:
    url, replicas = router
    client = httpx.Client(base_url=url, timeout=180)
    cached: dict[str, list[int]] = {}
    for topic in TOPICS:
        messages = [{"role": "system", "content": _system(topic)}]
        cached[topic] = []
        for turn in ("Who are you?", "What did you do today?", "And tomorrow?"):
            messages.append({"role": "user", "content": turn})
            body = {"model": "tgi", "messages": messages, "max_tokens": 4, "temperature": 0}
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            answer = r.json()
            usage = answer["usage"]
            assert usage["prompt_tokens"] > 900
            cached[topic].append(usage["prompt_tokens_details"]["cached_tokens"])
            messages.append({"role": "assistant", "content": answer["choices"][0]["message"]["content"]})
    for topic, tokens in cached.items():
        assert all(n >= 512 for n in tokens[1:]), (topic, tokens)
    # what routers and gateways read from each replica, under vLLM's names
    for replica in replicas:
        text = httpx.get(replica.url + "/metrics").text
        for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
            assert f"\n{name}{{" in text, name
