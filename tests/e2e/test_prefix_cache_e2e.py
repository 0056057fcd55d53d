"""Prefix caching through a real `tgi launch`: the OpenAI client reads `usage.prompt_tokens_details
.cached_tokens`, `/info` says the cache is on, `/metrics` counts the hits; a `cache_salt` reads only the
blocks of its own salt."""

from __future__ import annotations

import re

import httpx

SYSTEM = (
    "You answer in one short sentence. " + "Background: the museum opens at nine and closes at five. " * 12
)


def _hit_tokens(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return float(re.search(r"^tgi_prefix_cache_hit_tokens_total (\S+)$", text, re.M).group(1))


def test_openai_usage_reports_the_cached_prompt_tokens(server):
    from openai import OpenAI

    assert httpx.get(server.url + "/info").json()["prefix_caching"] is True
    client = OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "When does it open?"}]
    first = client.chat.completions.create(model="tgi", messages=messages, max_tokens=4, temperature=0)
    hits = _hit_tokens(server.url)
    again = client.chat.completions.create(
        model="tgi",
        messages=messages,
        max_tokens=4,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = list(again)[-1].usage
    n = first.usage.prompt_tokens
    assert usage.prompt_tokens == n > 100
    # every full block but the one holding the last prompt token, which is computed to sample from
    assert usage.prompt_tokens_details.cached_tokens == (n - 1) // 16 * 16
    assert first.usage.prompt_tokens_details.cached_tokens <= (n - 1) // 16 * 16
    assert _hit_tokens(server.url) - hits == (n - 1) // 16 * 16


def test_cache_salt_keeps_the_cached_blocks_apart(server):
    import uuid

    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "When does it close?"}]

    def cached(salt: str) -> tuple[int, int]:
        r = client.chat.completions.create(
            model="tgi", messages=messages, max_tokens=1, temperature=0, extra_body={"cache_salt": salt}
        )
        return r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens

    run = uuid.uuid4().hex  # salts no earlier request of this server gave
    n, first = cached(f"a-{run}")
    assert first == 0  # the system prompt's blocks other tests cached unsalted are not read
    assert cached(f"b-{run}")[1] == 0  # another salt: nothing of a's
    assert cached(f"a-{run}")[1] == (n - 1) // 16 * 16  # the same salt: every full block but the last
