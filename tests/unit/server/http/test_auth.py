"""The key check's headers: `Authorization: Bearer <key>` and Anthropic's `x-api-key: <key>`."""

from __future__ import annotations

from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings

GEN = {"inputs": "Hi", "parameters": {"max_new_tokens": 1}}


def test_x_api_key_presents_the_inference_key():
    with TestClient(create_app(FakeEngine(), ServerSettings(api_key="s3cret"))) as c:
        assert c.post("/generate", json=GEN, headers={"x-api-key": "s3cret"}).status_code == 200
        assert c.get("/v1/models", headers={"x-api-key": " s3cret "}).status_code == 200
        assert c.post("/generate", json=GEN, headers={"x-api-key": "nope"}).status_code == 401
        assert c.post("/generate", json=GEN, headers={"x-api-key": "Bearer s3cret"}).status_code == 401
        # either header may present it: a client that sends both is let in by the one that matches
        both = {"x-api-key": "s3cret", "Authorization": "Bearer other"}
        assert c.post("/generate", json=GEN, headers=both).status_code == 200
        both = {"x-api-key": "other", "Authorization": "Bearer s3cret"}
        assert c.post("/generate", json=GEN, headers=both).status_code == 200


def test_x_api_key_is_checked_per_route_class():
    settings = ServerSettings(api_key="s3cret", admin_api_key="adm1n")
    with TestClient(create_app(FakeEngine(), settings)) as c:
        # the inference key does not open an operator route, nor the admin key an inference route
        assert c.post("/v1/unload_lora_adapter", json={}, headers={"x-api-key": "s3cret"}).status_code == 401
        assert c.post("/generate", json=GEN, headers={"x-api-key": "adm1n"}).status_code == 401
        assert c.post("/generate", json=GEN, headers={"x-api-key": "s3cret"}).status_code == 200
