"""`ModelPool` with stand-in engines (what it decides, not how a model loads: tests/e2e/test_several_models_e2e.py
loads real ones): names resolved as Ollama spells them, the least recently used idle model unloaded past
`--max-loaded-models`, a load waiting while every loaded model is in use and going on once one is released (the requests sent to
the model being unloaded waiting behind it), a model that does not fit refused with the figures once none is
loaded, idle models unloaded after
their keep-alive but never the last one, and the routes that name no model moved off an unloaded engine."""

from __future__ import annotations

import asyncio

import pytest

from tgi.core.config import EngineConfig
from tgi.server.http.errors import ApiError
from tgi.server.served_models import pool as pool_module
from tgi.server.served_models.pool import ModelPool


class StandInEngine:
    def __init__(self, name: str) -> None:
        self.name = name
        self.on_death = None
        self.started = self.stopped = self.closed = False

    async def start(self) -> None:
        self.started = True

    async def shutdown(self, cancel_inflight: bool = False) -> None:
        self.stopped = True

    def close(self) -> None:
        self.closed = True


def make_pool(names, max_loaded=0, keep_alive_s=None, fits=lambda config: None):
    switched = []
    first = StandInEngine(names[0])
    pool = ModelPool(
        [(n, EngineConfig(model_id=n)) for n in names],
        first,
        max_loaded=max_loaded,
        keep_alive_s=keep_alive_s,
        load=lambda config: StandInEngine(config.model_id),
        fits=fits,
        on_switch=switched.append,
    )
    return pool, first, switched


@pytest.fixture(autouse=True)
def no_collection(monkeypatch):
    monkeypatch.setattr(pool_module, "_collect", lambda gone: None)  # gc passes: not what is tested here


def test_names_resolve_as_declared_or_as_ollama_spells_them():
    pool, _, _ = make_pool(["owner/a-GGUF:Q4_K_M", "b", "c:latest"])
    assert pool.resolve(None).name == "owner/a-GGUF:Q4_K_M"  # no name: the default
    assert pool.resolve("b:latest").name == "b"
    assert pool.resolve("c").name == "c:latest"
    assert pool.resolve("owner/a-GGUF:Q4_K_M").name == "owner/a-GGUF:Q4_K_M"
    assert pool.resolve("owner/a-GGUF") is None and pool.resolve("d") is None


async def test_past_the_limit_the_least_recently_used_idle_model_is_unloaded():
    pool, first, switched = make_pool(["a", "b", "c"], max_loaded=2)
    b = await pool.acquire(pool.models["b"])
    pool.release(pool.models["b"])
    a = await pool.acquire(pool.models["a"])  # a used after b: b is the least recently used
    pool.release(pool.models["a"])
    c = await pool.acquire(pool.models["c"])
    pool.release(pool.models["c"])
    assert a is first and b.stopped and b.closed and not first.stopped and c.started
    assert [m.name for m in pool.loaded()] == ["a", "c"]
    assert switched == []  # the default stayed loaded: the routes that name no model read it throughout


async def test_a_load_waits_while_every_loaded_model_is_in_use_and_new_requests_wait_behind_it(monkeypatch):
    monkeypatch.setattr(pool_module, "_POLL_S", 0.0)
    pool, first, switched = make_pool(["a", "b"], max_loaded=1)
    await pool.acquire(pool.models["a"])  # a request on a, unfinished
    loading = asyncio.ensure_future(pool.acquire(pool.models["b"]))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not loading.done() and not first.stopped  # a's request finishes first
    later_on_a = asyncio.ensure_future(pool.acquire(pool.models["a"]))  # a is being unloaded: it waits
    for _ in range(20):
        await asyncio.sleep(0)
    assert not later_on_a.done() and pool.models["a"].leases == 1
    pool.release(pool.models["a"])
    b = await loading
    assert first.stopped and b.started and switched == [b]  # routes that name no model moved off a
    pool.release(pool.models["b"])
    a_again = await later_on_a  # then a is loaded again for it, b unloaded
    assert a_again is not first and a_again.started and b.stopped


async def test_a_model_that_does_not_fit_with_none_loaded_is_refused_with_the_figures():
    pool, first, _ = make_pool(["a", "b"], fits=lambda config: "it needs 9.00 GiB, 1.00 GiB are free")
    with pytest.raises(ApiError) as refused:
        await pool.acquire(pool.models["b"])
    assert (
        refused.value.status == 507 and "9.00 GiB" in refused.value.message and "b" in refused.value.message
    )
    assert pool.models["b"].leases == 0 and first.stopped  # a was unloaded to try


async def test_a_model_that_does_not_fit_unloads_others_first():
    pool, first, _ = make_pool(["a", "b"], fits=lambda config: None if first.stopped else "it needs more")
    b = await pool.acquire(pool.models["b"])
    assert first.stopped and pool.models["a"].engine is None and b.started


async def test_keep_alive_unloads_idle_models_but_never_the_last(monkeypatch):
    monkeypatch.setattr(pool_module, "_REAP_EVERY_S", 0.0)
    pool, first, _ = make_pool(["a", "b"], keep_alive_s=0.0)
    b = await pool.acquire(pool.models["b"])
    pool.models["b"].keep_alive_s = -1.0  # Ollama's "keep it loaded", for b (`selection` sets it)
    pool.release(pool.models["b"])
    pool.start_reaper()
    while not first.stopped:
        await asyncio.sleep(0)
    assert [m.name for m in pool.loaded()] == ["b"] and not b.stopped
    pool.models["b"].keep_alive_s = 0.0
    for _ in range(50):
        await asyncio.sleep(0)
    assert not b.stopped  # the last model loaded stays
    await pool.shutdown(cancel_inflight=True)
    assert b.stopped
