"""Tenants and `cache_salt` against the fake engine: `--api-key-file`'s keys each open the inference routes as
their tenant, which reaches the engine's request with the client's `cache_salt` (an empty one is a 422 on
every route that takes it); another tenant's stored response is a 404 like an unknown id's, for `GET`,
`DELETE` and `previous_response_id`."""

from __future__ import annotations

import argparse

import pytest
from fastapi.testclient import TestClient

from fake_engine import conversation_engine
from tgi.core.config import ConfigError
from tgi.server.app import create_app
from tgi.server.cli.launch import add_launch_arguments, server_settings
from tgi.server.http.auth import key_tenant, read_api_key_file
from tgi.server.service.settings import ServerSettings

KEYS = (("key-a", "team-a"), ("key-a2", "team-a"), ("key-b", "team-b"), ("key-c", key_tenant("key-c")))
CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def _bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def engine():
    return conversation_engine()


@pytest.fixture
def client(engine):
    with TestClient(create_app(engine, ServerSettings(api_keys=KEYS, api_key="single"))) as c:
        yield c


def test_the_key_file_names_tenants(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# operators' keys\n\n  key-a team-a\nkey-a2\tteam-a\nkey-b team-b  \nkey-c\n")
    assert read_api_key_file(str(path)) == KEYS
    assert "key-c" not in key_tenant("key-c") and key_tenant("key-c") != key_tenant("key-d")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("secret-1 a b\n", "line 1: write a key, then optionally one tenant name"),
        ("secret-1 a\n# x\nsecret-1 b\n", "line 3: the key of line 1 again"),
        ("# nothing\n\n", "holds no key"),
    ],
)
def test_a_bad_key_file_is_refused_naming_no_key(tmp_path, text, message):
    path = tmp_path / "keys"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as refused:
        read_api_key_file(str(path))
    assert "secret" not in str(refused.value)


def _settings(*argv: str) -> ServerSettings:
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    return server_settings(parser.parse_args(list(argv)))


def test_the_flag_reads_the_file_and_refuses_a_shared_key(tmp_path):
    path = tmp_path / "keys"
    path.write_text("key-a team-a\nkey-b\n")
    assert _settings("--api-key-file", str(path)).api_keys == (
        ("key-a", "team-a"),
        ("key-b", key_tenant("key-b")),
    )
    for flag in ("--admin-api-key", "--api-key"):
        with pytest.raises(ConfigError, match=f"{flag} must differ from every key of --api-key-file"):
            _settings("--api-key-file", str(path), flag, "key-b")
    with pytest.raises(ConfigError, match="cannot be read"):
        _settings("--api-key-file", str(tmp_path / "missing"))


def test_each_key_opens_the_routes_as_its_tenant(client, engine):
    for key, tenant in (*KEYS, ("single", key_tenant("single"))):
        r = client.post("/v1/chat/completions", json=CHAT, headers=_bearer(key))
        assert r.status_code == 200, r.text
        assert engine.queued[-1].tenant == tenant and engine.queued[-1].cache_salt is None
    r = client.post("/generate", json={"inputs": "Hi"}, headers={"x-api-key": "key-b"})
    assert r.status_code == 200 and engine.queued[-1].tenant == "team-b"
    for headers in ({}, _bearer("key-z"), _bearer("team-a")):
        assert client.post("/v1/chat/completions", json=CHAT, headers=headers).status_code == 401


def test_a_server_without_keys_has_no_tenant(engine):
    with TestClient(create_app(engine)) as c:
        assert c.post("/v1/chat/completions", json={**CHAT, "cache_salt": "s"}).status_code == 200
    assert engine.queued[-1].tenant is None and engine.queued[-1].cache_salt == "s"


ROUTES = [
    ("/v1/chat/completions", lambda salt: {**CHAT, "cache_salt": salt}),
    ("/v1/completions", lambda salt: {"prompt": "Hi", "max_tokens": 2, "cache_salt": salt}),
    ("/generate", lambda salt: {"inputs": "Hi", "parameters": {"max_new_tokens": 2, "cache_salt": salt}}),
    ("/v1/responses", lambda salt: {"input": "Hi", "max_output_tokens": 2, "cache_salt": salt}),
]


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[r[0] for r in ROUTES])
def test_cache_salt_reaches_the_engine_request(client, engine, path, body):
    r = client.post(path, json=body("s1"), headers=_bearer("key-b"))
    assert r.status_code == 200, r.text
    assert (engine.queued[-1].cache_salt, engine.queued[-1].tenant) == ("s1", "team-b")
    r = client.post(path, json=body(""), headers=_bearer("key-b"))
    assert r.status_code == 422 and "cache_salt" in r.text, r.text
    assert len(engine.queued) == 1


def test_another_tenants_response_is_not_found(client):
    a, b = _bearer("key-a"), _bearer("key-b")
    stored = client.post("/v1/responses", json={"input": "Hi"}, headers=a).json()["id"]
    assert client.get(f"/v1/responses/{stored}", headers=_bearer("key-a2")).status_code == 200  # same tenant
    unknown = "resp_" + "0" * 32
    for response_id in (stored, unknown):  # the other tenant cannot tell the two apart
        got = client.get(f"/v1/responses/{response_id}", headers=b)
        assert got.status_code == 404
        assert got.json()["error"]["message"] == f"Response with id '{response_id}' not found."
        assert client.delete(f"/v1/responses/{response_id}", headers=b).status_code == 404
        went_on = client.post(
            "/v1/responses", json={"input": "More", "previous_response_id": response_id}, headers=b
        )
        assert went_on.status_code == 404
        assert went_on.json()["error"]["param"] == "previous_response_id"
        assert response_id in went_on.json()["error"]["message"]
    more = client.post("/v1/responses", json={"input": "More", "previous_response_id": stored}, headers=a)
    assert more.status_code == 200
    assert client.delete(f"/v1/responses/{stored}", headers=a).status_code == 200
