"""POST /flush_cache and /reset_prefix_cache (an operator route) and the gauges routers read under vLLM's names,
against the fake engine."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings


def test_flush_cache_resets_the_engines_prefix_cache() -> None:
    engine = FakeEngine()
    with TestClient(create_app(engine)) as c:
        for path in ("/flush_cache", "/reset_prefix_cache"):
            r = c.post(path)
            assert r.status_code == 200 and r.json() == {"flushed_blocks": 0}
        assert engine.prefix_cache_resets == 2
        assert c.get("/flush_cache").status_code == 405


def test_flush_cache_takes_only_the_operator_key_when_there_is_one() -> None:
    engine = FakeEngine()
    settings = ServerSettings(api_key="user", admin_api_key="admin")
    with TestClient(create_app(engine, settings)) as c:
        assert c.post("/flush_cache").status_code == 401
        assert c.post("/flush_cache", headers={"Authorization": "Bearer user"}).status_code == 401
        assert c.post("/flush_cache", headers={"Authorization": "Bearer admin"}).status_code == 200
        assert engine.prefix_cache_resets == 1


def test_without_an_operator_key_it_is_behind_the_inference_key() -> None:
    engine = FakeEngine()
    with TestClient(create_app(engine, ServerSettings(api_key="user"))) as c:
        assert c.post("/flush_cache").status_code == 401
        assert c.post("/flush_cache", headers={"Authorization": "Bearer user"}).status_code == 200


def test_vllm_gauges_are_exposed_with_the_model_name() -> None:
    engine = FakeEngine()
    with TestClient(create_app(engine)) as c:
        text = c.get("/metrics").text
    stats = engine.stats()
    usage = 1 - stats.num_free_blocks / stats.num_total_blocks
    name = re.search(r'^vllm:num_requests_running\{model_name="([^"]+)"\} ', text, re.M).group(1)
    for metric, value in (
        ("vllm:num_requests_running", stats.num_running),
        ("vllm:num_requests_waiting", stats.num_waiting),
        ("vllm:kv_cache_usage_perc", usage),
        ("vllm:gpu_cache_usage_perc", usage),
    ):
        m = re.search(rf'^{re.escape(metric)}\{{model_name="{re.escape(name)}"\}} (\S+)$', text, re.M)
        assert m and float(m.group(1)) == value, metric
