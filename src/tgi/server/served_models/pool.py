"""Several models behind one server (`--model-id` given more than once), loaded on demand.

Each model is named by the `--model-id` value that declared it. The first is the default (TGI's and TEI's
routes, which name no model, and a request whose `model` names none of them but a LoRA adapter of it); it
is loaded at start, the others at their first request: that request waits while the others go on.

- At most `max_loaded` models are loaded at once (`--max-loaded-models`; 0: no limit but memory). A load
  past the limit first unloads the least recently used model that no request is using; when every loaded
  model is in use, the least recently used one takes no new request and is unloaded once its requests
  have finished (requests to a model being unloaded finish first; those sent to it meanwhile wait, and
  load it again after this load: a model in steady use does not hold its place against a waiting one).
- Memory is checked before a load, as a model swap checks it (`tgi.server.swap.estimate`: the model's
  config alone, no weight fetched): when the model does not fit beside those loaded, they are unloaded as
  above, one at a time, until it does; when it does not fit with none loaded, the request is refused (507,
  with both figures).
- A model idle for its keep-alive is unloaded (`--keep-alive`, Ollama's semantics: a negative value keeps it
  loaded; Ollama's per-request `keep_alive` sets it for that model from that request's end on). The last
  loaded model stays: `/health`, `/metrics` and `/info` read one.

A model's engine starts with the settings of the first (`--max-batch-total-tokens`, the dtype, ...) and its
own `model_id`; an unloaded model's engine is stopped, its weights and KV cache released and the engine
collected, as a swapped-out model's are (`tgi.server.swap.swapper`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tgi.core.config import EngineConfig
from tgi.server.http.errors import ApiError, logged_refusal

log = logging.getLogger("tgi.server")

#: how often idle models are checked against their keep-alive (seconds)
_REAP_EVERY_S = 1.0
#: how often a load waiting for a model's last request, or a request waiting for its model's unload, looks
_POLL_S = 0.05


@dataclass
class PooledModel:
    """One model the server serves: its engine while loaded (None otherwise), the requests using it
    (`leases`), when it was last used, and how long it stays loaded once idle (None: until it is the least
    recently used and another model needs its place)."""

    name: str
    config: EngineConfig
    engine: Any = None
    leases: int = 0
    last_used: float = field(default_factory=time.monotonic)
    keep_alive_s: float | None = None
    draining: bool = False  # chosen to be unloaded: it takes no new request until it is


class ModelPool:
    """The models of one server (module docstring). `load(config)` builds an engine (blocking: it runs on a
    worker thread; the pool starts it on the event loop); `fits(config)` is None when the model fits
    in the memory left, else the refusal's text; `on_switch(engine)` is told the engine now serving the
    routes that name no model (the default's, or another loaded one's while the default is not loaded)."""

    def __init__(
        self,
        models: list[tuple[str, EngineConfig]],
        first_engine: Any,
        *,
        max_loaded: int,
        keep_alive_s: float | None,
        load: Callable[[EngineConfig], Any],
        fits: Callable[[EngineConfig], str | None],
        on_switch: Callable[[Any], None],
    ) -> None:
        self.models = {n: PooledModel(n, c, keep_alive_s=keep_alive_s) for n, c in models}
        self.default = models[0][0]
        self.models[self.default].engine = first_engine
        self._serving = first_engine  # what the routes that name no model read (`on_switch`)
        self.max_loaded = max_loaded
        self._load, self._fits, self._on_switch = load, fits, on_switch
        self._loading = asyncio.Lock()  # one load (and its evictions) at a time
        self._reaper: asyncio.Task | None = None
        self.on_death: Callable[[BaseException], None] | None = None

    # -- what requests use --------------------------------------------------------------------------------
    def resolve(self, model: str | None) -> PooledModel | None:
        """The model `model` names: its name, or Ollama's spelling of it (`name:latest`, or `name` for a
        model declared as `name:latest`); None when it names none of them."""
        if not model:
            return self.models[self.default]
        for candidate in (model, model.removesuffix(":latest"), f"{model}:latest"):
            if candidate in self.models:
                return self.models[candidate]
        return None

    async def acquire(self, entry: PooledModel) -> Any:
        """`entry`'s engine, loaded first when it is not (the caller waits), with a lease the caller ends
        with `release`: the model is not unloaded while a lease is held."""
        while entry.draining:  # it is being unloaded: taken again once it is (loaded again for this one)
            await asyncio.sleep(_POLL_S)
        entry.leases += 1
        try:
            if entry.engine is None:
                async with self._loading:
                    if entry.engine is None:
                        await self._load_model(entry)
        except BaseException:
            self.release(entry)
            raise
        entry.last_used = time.monotonic()
        return entry.engine

    def release(self, entry: PooledModel) -> None:
        """End one lease of `entry` (its idle time, and so its keep-alive, counts from now)."""
        entry.leases -= 1
        entry.last_used = time.monotonic()

    def loaded(self) -> list[PooledModel]:
        return [m for m in self.models.values() if m.engine is not None]

    def expires_at(self, entry: PooledModel) -> float | None:
        """When (`time.time()`) an idle `entry` is unloaded; None: not by its keep-alive."""
        if entry.keep_alive_s is None or entry.keep_alive_s < 0:
            return None
        return time.time() + max(0.0, entry.last_used + entry.keep_alive_s - time.monotonic())

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start_reaper(self) -> None:
        self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def shutdown(self, cancel_inflight: bool) -> None:
        """Stop every loaded engine (at server exit)."""
        if self._reaper is not None:
            self._reaper.cancel()
        for entry in self.loaded():
            await entry.engine.shutdown(cancel_inflight=cancel_inflight)

    def engines(self) -> list[Any]:
        return [m.engine for m in self.loaded()]

    # -- loading and unloading ------------------------------------------------------------------------------
    async def _load_model(self, entry: PooledModel) -> None:
        unloaded = []  # collected once the routes that name no model read another engine
        while self.max_loaded and len(self.loaded()) >= self.max_loaded:
            unloaded.append(await self._unload_one(f"--max-loaded-models {self.max_loaded}"))
        while (why := await asyncio.to_thread(self._fits, entry.config)) is not None:
            if not self.loaded():  # nothing left to unload
                raise ApiError(507, f"the model {entry.name} does not fit: {why}", "insufficient_memory")
            unloaded.append(await self._unload_one("memory"))
        started = time.perf_counter()
        try:
            engine = await asyncio.to_thread(self._load, entry.config)
        except Exception as exc:
            raise logged_refusal(
                500, f"cannot load the model {entry.name}", exc, "model_load_failed"
            ) from None
        engine.on_death = self.on_death
        await engine.start()
        entry.engine, entry.last_used = engine, time.monotonic()
        log.info("loaded %s in %.1fs", entry.name, time.perf_counter() - started)
        if entry.name == self.default or len(self.loaded()) == 1:
            self._switch(engine)
        for gone in unloaded:
            _collect(gone)

    async def _unload_one(self, why: str) -> weakref.ref | None:
        """Unload the least recently used idle model; when every loaded model is in use, the least recently
        used one once its requests have finished (it takes no new one meanwhile: those wait, and load it
        again after this load, so that a model in steady use cannot hold its place against a waiting one)."""
        idle = [m for m in self.loaded() if m.leases == 0]
        victim = min(idle or self.loaded(), key=lambda m: m.last_used)
        victim.draining = True
        try:
            while victim.leases:
                await asyncio.sleep(_POLL_S)
            return await self._unload(victim, why)
        finally:
            victim.draining = False

    async def _unload(self, entry: PooledModel, why: str) -> weakref.ref | None:
        """Stop `entry`'s engine and release its model; the engine object, once nothing reads it, is
        collected by `_collect` of the reference returned (None: it could not be released)."""
        engine, entry.engine = entry.engine, None
        engine.on_death = None  # its thread ending now is no reason for the server to stop
        log.info("unloading %s (%s)", entry.name, why)
        others = self.loaded()
        if others and engine is self._serving:  # the routes that name no model read another one meanwhile
            self._switch(next((m for m in others if m.name == self.default), others[0]).engine)
        await engine.shutdown()
        try:
            await asyncio.to_thread(engine.close)
        except Exception:
            log.exception("the model %s could not be released", entry.name)
            return None
        log.info("unloaded %s", entry.name)
        return weakref.ref(engine)

    def _switch(self, engine: Any) -> None:
        self._serving = engine
        self._on_switch(engine)

    async def _reap(self) -> None:
        """Unload the models idle past their keep-alive (never the last one loaded)."""
        while True:
            await asyncio.sleep(_REAP_EVERY_S)
            now = time.monotonic()
            for entry in self.loaded():
                keep = entry.keep_alive_s
                expired = keep is not None and keep >= 0 and now - entry.last_used >= keep
                if expired and entry.leases == 0 and len(self.loaded()) > 1 and not self._loading.locked():
                    async with self._loading:
                        if entry.engine is not None and entry.leases == 0:
                            _collect(await self._unload(entry, "keep-alive"))


def _collect(gone: weakref.ref | None) -> None:
    if gone is not None:
        from tgi.server.swap.swapper import collect_released

        collect_released(gone, 0)
