"""--api-key, /metrics (TGI names, per-app registry), and cancellation when the client disconnects."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from asgi_calls import disconnect_after, http_scope, ignore
from fastapi.testclient import TestClient

from fake_engine import FakeEngine, error_of
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings


def gen(**parameters):
    return {"inputs": "Hi", "parameters": parameters}


def test_api_key_on_every_route_but_health():
    with TestClient(create_app(FakeEngine(), ServerSettings(api_key="s3cret"))) as c:
        assert c.get("/health").status_code == 200
        for method, path in [("get", "/info"), ("get", "/metrics"), ("get", "/v1/models"), ("get", "/docs")]:
            r = getattr(c, method)(path)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            kind = "invalid_request_error" if path.startswith("/v1/") else "unauthorized"
            assert error_of(r, path) == ("Unauthorized", kind)
        assert c.post("/generate", json=gen(max_new_tokens=1)).status_code == 401
        bad = {"Authorization": "Bearer nope"}
        assert c.post("/generate", json=gen(max_new_tokens=1), headers=bad).status_code == 401
        ok = {"Authorization": "Bearer s3cret"}
        assert c.post("/generate", json=gen(max_new_tokens=1), headers=ok).status_code == 200
        assert c.get("/v1/models", headers=ok).status_code == 200


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    assert m, f"{name} not in metrics"
    return float(m.group(1))


def test_metrics_count_what_was_sent_and_apps_do_not_clash():
    engine = FakeEngine()
    with TestClient(create_app(engine)) as c, TestClient(create_app(FakeEngine())) as other:
        c.post("/generate", json=gen(max_new_tokens=3))
        c.post("/generate_stream", json=gen(max_new_tokens=2))
        c.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 4})
        c.post("/generate", json=gen(temperature=0))
        text = c.get("/metrics").text
        assert metric(text, "tgi_request_count") == 4
        assert metric(text, "tgi_request_success") == 3
        assert metric(text, 'tgi_request_failure{err="validation"}') == 1
        assert metric(text, "tgi_request_generated_tokens_count") == 3
        assert metric(text, "tgi_request_generated_tokens_sum") == 9
        assert metric(text, "tgi_request_input_length_sum") == 6
        assert metric(text, "tgi_request_duration_count") == 3  # one per successful request
        for name in ("queue_duration", "inference_duration", "mean_time_per_token_duration"):
            assert metric(text, f"tgi_request_{name}_count") == 3  # one per generated sequence
        for gauge in ("tgi_batch_current_size", "tgi_batch_current_max_tokens", "tgi_queue_size"):
            assert metric(text, gauge) == 0
        assert metric(text, "tgi_kv_free_blocks") == metric(text, "tgi_kv_total_blocks") == 64
        for name in ("hit", "miss"):  # read from the engine's counters (the fake's are 0)
            assert metric(text, f"tgi_prefix_cache_{name}_tokens_total") == 0
        for name in ("step", "encoder"):  # the vision encoder's share of the steps' time
            assert metric(text, f"tgi_{name}_seconds_total") == 0
        assert metric(other.get("/metrics").text, "tgi_request_count") == 0
        assert "tgi_request_count_total" not in text


@pytest.mark.parametrize("spec", ["2.3", "2.4"])
@pytest.mark.parametrize("path", ["/generate_stream", "/v1/chat/completions"])
async def test_disconnect_mid_stream_cancels_the_engine_stream(spec, path):
    engine = FakeEngine(delay=0.01)
    app = create_app(engine, ServerSettings(start_engine=False))
    if path == "/generate_stream":
        payload = gen(max_new_tokens=100)
    else:
        payload = {"messages": [{"role": "user", "content": "x"}], "stream": True, "max_tokens": 100}
    body = json.dumps(payload).encode()
    got_chunk = asyncio.Event()
    state = {"body_sent": False, "chunks": 0}

    async def receive():
        if not state["body_sent"]:
            state["body_sent"] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await got_chunk.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body" and message.get("body"):
            state["chunks"] += 1
            if got_chunk.is_set() and spec == "2.4":
                raise OSError("client went away")
            got_chunk.set()

    await asyncio.wait_for(app(http_scope(path, spec), receive, send), 5)
    assert state["chunks"] < 10
    assert len(engine.cancelled) == 1 and engine.running == 0
    assert app.state.service.in_flight == 0
    assert 'tgi_request_failure{err="cancelled"}' in app.state.service.metrics.render().decode()


async def test_disconnect_during_non_streamed_generate_cancels():
    engine = FakeEngine(delay=0.01)
    app = create_app(engine, ServerSettings(start_engine=False))
    receive = disconnect_after(json.dumps(gen(max_new_tokens=100)).encode(), 0.05)
    await asyncio.wait_for(app(http_scope("/generate", "2.3"), receive, ignore), 5)
    assert len(engine.cancelled) == 1 and engine.running == 0
    assert app.state.service.in_flight == 0
