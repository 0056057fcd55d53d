"""`tgi launch --deterministic` (a real server, the OpenAI client): `/info` and the start-up log say the mode
is on, and a seeded sampled completion and a greedy one give the same text alone and among 7 concurrent
requests of other lengths."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

PROMPT = "Once upon a time, in a small village at the edge of a great forest, there lived"
OTHERS = ["Hi", "The capital of France is", "1, 2, 3,", "def add(a, b):", "A list of fruits:\n1."] * 2


@pytest.fixture(scope="module")
def server(launch_server, stop_server, tmp_path_factory):
    # room for the 9 requests sent at once (the e2e default of 4 would answer some with a 429)
    s = launch_server(
        tmp_path_factory.mktemp("deterministic"), "--deterministic", "--max-concurrent-requests", "16"
    )
    yield s
    assert stop_server(s) == 0, s.logs()


def test_info_and_the_start_up_line_say_the_mode_is_on(server):
    info = httpx.get(server.url + "/info").json()
    assert info["deterministic"] is True
    assert "--deterministic" in info["kernels"]["prefill attention"]
    assert "deterministic mode on" in server.logs()


def test_completions_are_the_same_alone_and_among_others(server):
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)

    def complete(prompt: str, seed: int | None, max_tokens: int = 8) -> str:
        sampled = dict(temperature=0.9, top_p=0.9, seed=seed) if seed is not None else dict(temperature=0)
        return (
            client.completions.create(model="tgi", prompt=prompt, max_tokens=max_tokens, **sampled)
            .choices[0]
            .text
        )

    alone = [complete(PROMPT, None), complete(PROMPT, 1234)]
    with ThreadPoolExecutor(len(OTHERS) + 2) as pool:
        others = [pool.submit(complete, p, i if i % 2 else None, 4 + i) for i, p in enumerate(OTHERS[:7])]
        targets = [pool.submit(complete, PROMPT, None), pool.submit(complete, PROMPT, 1234)]
        assert [t.result() for t in targets] == alone
        assert all(o.result() is not None for o in others)
