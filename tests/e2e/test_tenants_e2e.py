"""Tenants through a real `tgi launch --api-key-file` (the session's keyed server, tests/e2e/conftest.py: the
default model; these tests only send requests, under keys of their own), spoken to with the official `openai` client: a tenant's repeated prompt reads the prefix cache, another
tenant's identical prompt reads none of it (`usage.prompt_tokens_details.cached_tokens`), and another
tenant's stored response is a 404 for `GET`, `DELETE` and `previous_response_id`."""

from __future__ import annotations

import pytest

PROMPT = "Tenant-private document: " + "the vault code is under the third floorboard. " * 8


@pytest.fixture(scope="module")
def tenants_server(keyed_server):
    """The session's keyed server: its `--api-key-file` names the tenants (`e2e_server.TENANT_KEYS`)."""
    return keyed_server


def _client(server, key: str):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key=key, timeout=120, max_retries=0)


def _cached(client, **extra) -> tuple[int, int]:
    r = client.chat.completions.create(
        model="tgi", messages=[{"role": "user", "content": PROMPT}], max_tokens=2, temperature=0, **extra
    )
    return r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens


def test_a_tenant_never_reads_another_tenants_cached_blocks(tenants_server):
    a, b = _client(tenants_server, "key-of-a"), _client(tenants_server, "key-of-b")
    n, first = _cached(a)
    assert n > 100 and first == 0
    assert _cached(a)[1] == (n - 1) // 16 * 16  # its own prompt again: every full block but the last
    assert _cached(b)[1] == 0  # the same prompt, another tenant: nothing of a's
    assert _cached(b)[1] == (n - 1) // 16 * 16  # its own, once computed
    # a salt partitions a tenant's blocks further
    assert _cached(a, extra_body={"cache_salt": "project-1"})[1] == 0


def test_another_tenants_response_is_not_found(tenants_server):
    import openai

    a, b = _client(tenants_server, "key-of-a"), _client(tenants_server, "key-of-b")
    stored = a.responses.create(model="tgi", input="Remember this.", max_output_tokens=2)
    assert a.responses.retrieve(stored.id).id == stored.id
    for call in (
        lambda: b.responses.retrieve(stored.id),
        lambda: b.responses.delete(stored.id),
        lambda: b.responses.create(
            model="tgi", input="And?", previous_response_id=stored.id, max_output_tokens=2
        ),
        lambda: b.responses.retrieve("resp_" + "0" * 32),  # an unknown id: the same answer
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    with pytest.raises(openai.AuthenticationError):
        _client(tenants_server, "key-of-nobody").responses.retrieve(stored.id)
    a.responses.delete(stored.id)
