"""Swap the served model without dropping a request (TGI: "hot-swapping not supported").

`POST /admin/model {"model_id": ..., "revision": ...}` (only with `--enable-model-swap`, and only with the
admin key: `tgi.server.routes_admin`; refusals name no path and no exception, the log has them):

1. refuses, with the reason, when the new model's weights and KV cache do not fit in the memory left beside
   the current one (estimated from the new model's config alone before anything else is fetched, and without
   running its code: 507);
2. loads the new engine beside the old, on a worker thread (the old one keeps serving), with the serving
   engine's settings and the new model id (limits the new model cannot take are a 422 naming them);
3. starts it and sends every request admitted from then on to it (`InferenceService.switch_engine`);
   requests admitted before, streams included, finish on the old engine (`tgi.server.service` pins each
   request to the engine it was admitted on);
4. answers once the new model serves; in the background, waits for the old engine's last request, stops it
   and frees its memory.

One swap at a time (another is a 409). `--tokenizer-config-path`'s template applies to the first model only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time

from tgi.server.errors import ApiError, logged_refusal

log = logging.getLogger("tgi.server")

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def estimate_bytes(model_id: str | None, revision: str | None, config) -> tuple[int, str]:
    """Bytes the model `model_id` needs in the engine settings `config` (weights in the serving dtype and a
    KV cache of `max_batch_total_tokens`), from its config alone, read without fetching a weight file or
    running any of its code (`tgi.server.swap_estimate`); and a short description."""
    from tgi.server.swap_estimate import model_bytes, read_model_config

    return model_bytes(read_model_config(model_id, revision), config.dtype, config.max_batch_total_tokens)


class ModelSwapper:
    """Swaps `service`'s engine (see the module docstring)."""

    def __init__(self, service) -> None:
        self.service = service
        self._lock = asyncio.Lock()
        self.draining: set[asyncio.Task] = set()

    async def swap(self, model_id: str, revision: str | None = None) -> dict:
        if self._lock.locked():
            raise ApiError(409, "a model swap is already under way", "swap_in_progress")
        async with self._lock:
            return await self._swap(model_id, revision)

    async def _swap(self, model_id: str, revision: str | None) -> dict:
        old = self.service.current_engine
        settings = self.service.settings  # a swap never takes --trust-remote-code: its own flag
        trust = settings.swap_trust_remote_code
        config = dataclasses.replace(
            old.config, model_id=model_id, revision=revision, trust_remote_code=trust
        )
        backend = old.engine.backend
        try:
            need, what = await asyncio.to_thread(estimate_bytes, model_id, revision, config)
        except Exception as exc:  # not found, no config, not a model: the client's; the detail is logged
            raise logged_refusal(
                422, "cannot swap to the model: its config cannot be read", exc, "validation"
            ) from None
        free = backend.memory_info().free * config.memory_fraction
        if need > free:
            raise ApiError(
                507,
                f"the model does not fit beside the served one: it needs {need / 2**30:.2f} GiB "
                f"({what}), {free / 2**30:.2f} GiB are free",
                "insufficient_memory",
            )
        started = time.perf_counter()
        from tgi.core.async_engine import AsyncEngine

        try:
            new = await asyncio.to_thread(AsyncEngine.from_config, config)
        except Exception as exc:
            raise logged_refusal(422, "cannot load the model", exc, "validation") from None
        new.on_death = getattr(old, "on_death", None)
        await new.start()
        previous = self.service.switch_engine(new)
        load_s = time.perf_counter() - started
        waiting = self.service.users.get(id(previous), 0)
        log.info(
            "serving %s (loaded in %.1fs); %d requests finish on %s",
            new.model_id,
            load_s,
            waiting,
            old.model_id,
        )
        task = asyncio.get_running_loop().create_task(self._retire(previous))
        self.draining.add(task)
        task.add_done_callback(self.draining.discard)
        return {
            "model_id": new.model_id,
            "previous_model_id": previous.model_id,
            "load_time": load_s,
            "draining_requests": waiting,
        }

    async def _retire(self, engine) -> None:
        """Stop `engine` once its last admitted request has finished, and free it."""
        while self.service.users.get(id(engine), 0) > 0:
            await asyncio.sleep(0.05)
        engine.on_death = None  # its thread ending now is no reason for the server to stop
        await engine.shutdown()
        self.service.users.pop(id(engine), None)
        del engine
        gc.collect()
        log.info("the previous model is stopped and freed")
