"""Who may call what: the operator routes (`/admin/*`, the run-time LoRA routes) take only `--admin-api-key`,
the inference routes only `--api-key`; the operator flags that do not go together are refused at start, by
name (`tgi.server.http.auth`, `tgi.server.flags.checks`)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from launch_args import parse_launch_args as parse

from fake_engine import FakeEngine
from tgi.core.config import ConfigError
from tgi.server.app import create_app
from tgi.server.cli.launch import run_launch, server_settings
from tgi.server.service.settings import ServerSettings

INFERENCE = {"Authorization": "Bearer inference-key"}
ADMIN = {"Authorization": "Bearer admin-key"}
ENV = ("API_KEY", "ADMIN_API_KEY", "ENABLE_MODEL_SWAP", "SWAPPABLE_MODELS", "SWAP_TRUST_REMOTE_CODE", "LORA_ROOT",
       "MAX_LORAS", "MAX_LORA_RANK", "ALLOW_RUNTIME_LORA_UPDATING", "VLLM_ALLOW_RUNTIME_LORA_UPDATING")  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--enable-model-swap"], "--enable-model-swap needs --admin-api-key"),
        (["--enable-model-swap", "--admin-api-key", "a"], "--enable-model-swap needs --swappable-models"),
        (["--allow-runtime-lora-updating"], "--allow-runtime-lora-updating needs --admin-api-key"),
        (["--allow-runtime-lora-updating", "--admin-api-key", "a"], "--allow-runtime-lora-updating needs --lora-root"),
        (["--admin-api-key", "a", "--swappable-models", "m"], "--swappable-models needs --enable-model-swap"),
        (["--admin-api-key", "a", "--swap-trust-remote-code"], "--swap-trust-remote-code needs --enable-model-swap"),
        (["--admin-api-key", "k", "--api-key", "k"], "--admin-api-key must differ from --api-key"),
        (["--admin-api-key", " "], "--admin-api-key (or ADMIN_API_KEY) is empty"),
        (["--lora-root", "/tmp"], "--lora-root needs --allow-runtime-lora-updating"),
        (
            ["--enable-model-swap", "--admin-api-key", "a", "--swappable-models", "m", "--kv-events-config", '{"enable_kv_cache_events": true}'],
            "--kv-events-config cannot go with --enable-model-swap",
        ),
    ],
)  # fmt: skip
def test_operator_flags_that_do_not_go_together_are_refused_at_start(capsys, argv, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        server_settings(parse(argv))
    assert run_launch(parse([*argv, "--port", "0", "--hostname", "127.0.0.1"])) == 2
    assert message in capsys.readouterr().err


def test_operator_flags_read_their_environment_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("ADMIN_API_KEY", "adm")
    monkeypatch.setenv("ENABLE_MODEL_SWAP", "true")
    monkeypatch.setenv("SWAPPABLE_MODELS", "a/b, /models/c")
    monkeypatch.setenv("ALLOW_RUNTIME_LORA_UPDATING", "true")
    monkeypatch.setenv("LORA_ROOT", str(tmp_path))
    monkeypatch.setenv("MAX_LORAS", "3")
    monkeypatch.setenv("MAX_LORA_RANK", "16")
    args = parse([])
    s = server_settings(args)
    assert (s.admin_api_key, s.enable_model_swap, s.swappable_models) == ("adm", True, ("a/b", "/models/c"))
    assert s.lora_root == str(tmp_path.resolve()) and not s.swap_trust_remote_code
    assert (args.max_loras, args.max_lora_rank) == (3, 16)


def _app(tmp_path, **kw) -> TestClient:
    settings = ServerSettings(
        api_key="inference-key", admin_api_key="admin-key", enable_model_swap=True,
        allow_runtime_lora_updating=True, lora_root=str(tmp_path), **kw,
    )  # fmt: skip
    return TestClient(create_app(FakeEngine(), settings))


def test_operator_routes_take_only_the_admin_key_and_inference_routes_only_the_inference_key(tmp_path):
    gen = {"inputs": "Hi", "parameters": {"max_new_tokens": 2}}
    load = {"lora_name": "a", "lora_path": str(tmp_path / "a")}
    with _app(tmp_path, swappable_models=("allowed/model",)) as c:
        assert c.get("/health").status_code == 200
        for path, body in (
            ("/admin/model", {"model_id": "allowed/model"}),
            ("/admin/model/", {"model_id": "allowed/model"}),
            ("/v1/load_lora_adapter", load),
            ("/v1/unload_lora_adapter", {"lora_name": "a"}),
            ("/v1/load_lora_adapter/", load),
        ):
            for headers in ({}, INFERENCE, {"Authorization": "Bearer nope"}):
                r = c.post(path, json=body, headers=headers)
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (path, headers)
        assert c.post("/generate", json=gen, headers=ADMIN).status_code == 401  # no inference route
        assert c.get("/metrics", headers=ADMIN).status_code == 401
        assert c.post("/generate", json=gen, headers=INFERENCE).status_code == 200
        assert c.get("/metrics", headers=INFERENCE).status_code == 200  # the scraper's key
        # the admin key passes the key check; what the route then says is its own business
        r = c.post("/admin/model", json={"model_id": "/secret/place/model"}, headers=ADMIN)
        assert r.status_code == 403 and "--swappable-models" in r.json()["error"]
        assert "/secret" not in r.text


def test_a_lora_path_outside_the_root_is_refused_without_echoing_it(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "escape").symlink_to(tmp_path)  # inside by name, outside once resolved
    with _app(root) as c:
        for path in ("/etc", str(root / ".." / "x"), str(root / "escape")):
            r = c.post("/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": path}, headers=ADMIN)
            assert r.status_code == 403 and "--lora-root" in r.json()["error"]["message"], r.text
            assert path not in r.text and str(tmp_path) not in r.text


def test_the_operator_routes_without_an_admin_key_are_refused_naming_it():
    settings = ServerSettings(
        api_key="inference-key", enable_model_swap=True, allow_runtime_lora_updating=True
    )
    with TestClient(create_app(FakeEngine(), settings)) as c:
        r = c.post("/admin/model", json={"model_id": "x"}, headers=INFERENCE)
        assert r.status_code == 403 and "--admin-api-key" in r.json()["error"]
        r = c.post("/v1/unload_lora_adapter", json={"lora_name": "a"}, headers=INFERENCE)
        assert r.status_code == 403 and "--admin-api-key" in r.json()["error"]["message"]
