"""The model swap's parts on the fake engine: requests go to the engine serving when they were admitted
(a stream started before a switch ends on the old engine), /info follows the switch, and the admin route
is refused without --enable-model-swap, and a new model whose start fails is released, the old one serving on
(the real swap: tests/e2e/test_model_swap_e2e.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from fake_engine import FakeEngine
from tgi.core.config import EngineConfig
from tgi.server.app import create_app
from tgi.server.service.settings import ServerSettings


def test_requests_stay_on_the_engine_they_were_admitted_on():
    old, new = FakeEngine(delay=0.01), FakeEngine(model_id="new/model")
    app = create_app(old, ServerSettings())
    service = app.state.service
    body = {"inputs": "Hi", "parameters": {"max_new_tokens": 5}}
    with TestClient(app) as c:
        with c.stream("POST", "/generate_stream", json=body) as r:
            lines = r.iter_lines()
            next(line for line in lines if line.startswith("data:"))  # the first token, on the old engine
            assert service.switch_engine(new) is old
            assert sum(1 for line in lines if line.startswith("data:")) == 4  # the rest, still there
        assert service.users[id(old)] == 0
        assert c.post("/generate", json=body).status_code == 200
        assert c.get("/info").json()["model_id"] == "new/model"
    assert len(old.requests) == 1 and len(new.requests) == 1


def test_the_admin_route_is_off_without_enable_model_swap():
    with TestClient(create_app(FakeEngine(), ServerSettings())) as c:
        r = c.post("/admin/model", json={"model_id": "x"})
        assert r.status_code == 403 and "--enable-model-swap" in r.json()["error"]
    with TestClient(create_app(FakeEngine(), ServerSettings(admin_api_key="adm"))) as c:
        assert c.post("/admin/model", json={"model_id": "x"}).status_code == 401
        r = c.post("/admin/model", json={"model_id": "x"}, headers={"Authorization": "Bearer adm"})
        assert r.status_code == 403 and "--enable-model-swap" in r.json()["error"]
    with TestClient(create_app(FakeEngine(), ServerSettings(api_key="k"))) as c:
        assert c.post("/admin/model", json={"model_id": "x"}).status_code == 401
        r = c.post("/admin/model", json={"model_id": "x"}, headers={"Authorization": "Bearer k"})
        assert r.status_code == 403  # the inference key never swaps


def test_tokenizing_on_the_workers_uses_the_engine_the_request_was_admitted_on():
    """The validation workers run in the request's context: after a switch, a request admitted before it
    still tokenizes with the old engine's tokenizer."""
    import asyncio

    old, new = FakeEngine(), FakeEngine(model_id="new/model")
    service = create_app(old, ServerSettings()).state.service
    seen = []

    async def request():
        with service.admit():
            service.switch_engine(new)
            seen.append(await service._tokenizing(lambda: service.engine))

    asyncio.run(request())
    assert seen == [old]


def test_a_swap_whose_start_fails_releases_the_new_model_and_keeps_the_old(monkeypatch):
    from tgi.core.async_engine import AsyncEngine
    from tgi.server.http.errors import ApiError
    from tgi.server.swap import swapper as model_swap

    events = []

    class Unstartable:
        tokenizer = SimpleNamespace(chat_template=None)

        async def start(self):
            raise RuntimeError("no thread for /secret/models/new")

        async def shutdown(self, cancel_inflight=False, reason=None):
            events.append(("shutdown", cancel_inflight))

        def close(self):
            events.append("close")

    monkeypatch.setattr(model_swap, "estimate_bytes", lambda *args: (0, "nothing"))
    monkeypatch.setattr(AsyncEngine, "from_config", classmethod(lambda cls, config: Unstartable()))
    memory = SimpleNamespace(free=1 << 40)
    old = SimpleNamespace(
        config=EngineConfig(model_id="old/model"),
        engine=SimpleNamespace(backend=SimpleNamespace(memory_info=lambda: memory)),
        on_death=None,
    )
    service = SimpleNamespace(
        current_engine=old, settings=ServerSettings(), switch_engine=lambda new: events.append("switched")
    )
    with pytest.raises(ApiError) as refused:
        asyncio.run(model_swap.ModelSwapper(service).swap("new/model"))
    assert refused.value.status == 500 and "cannot start the model" in refused.value.message
    assert "/secret" not in refused.value.message  # the log has it, under the request id
    assert events == [("shutdown", True), "close"]  # never switched to, and released
