"""Swap the served model without dropping a request (TGI: "hot-swapping not supported").

`POST /admin/model {"model_id": ..., "revision": ...}` (only with `--enable-model-swap`, and only with the
admin key: `tgi.server.swap.routes`; refusals name no path and no exception, the log has them):

1. refuses, with the reason, when the new model's weights and KV cache do not fit in the memory left beside
   the current one (estimated from the new model's config alone before anything else is fetched, and without
   running its code: 507);
2. loads the new engine beside the old, on a worker thread (the old one keeps serving), with the serving
   engine's settings and the new model id (limits the new model cannot take are a 422 naming them);
3. starts it and sends every request admitted from then on to it (`InferenceService.switch_engine`);
   requests admitted before, streams included, finish on the old engine (`tgi.server.service.inference` pins each
   request to the engine it was admitted on);
4. answers once the new model serves; in the background, waits for the old engine's last request, for at
   most `--swap-drain-timeout` seconds (`SWAP_DRAIN_TIMEOUT`, default 60; 0: none). Requests still unfinished
   then end with an error that says the model was swapped out and the drain deadline passed: a 500
   `generation` error, or, once a stream has begun, its last event (TGI's or OpenAI's error event); a
   request admitted before the swap that reaches the engine only then is refused with the same message;
5. stops the old engine and frees its model: the runner drops the weights and the KV cache and stops its
   worker processes (`ModelRunner.shutdown`), the backend hands the freed memory back
   (`Backend.release_memory`: the C heap on the CPU, the caching allocator on GPUs), and the engine itself
   is collected. Nothing else keeps it (the app and the launcher reach the engine through the service only;
   the engine and its parts hold no reference cycle that the start-up `gc.freeze` would put out of the
   collector's reach), and the new model's objects are frozen in their turn.

One swap at a time (another is a 409). `--tokenizer-config-path`'s template applies to the first model only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
import weakref

from tgi.server.chat.parsers import unfit_parsers
from tgi.server.http.errors import ApiError, logged_refusal

log = logging.getLogger("tgi.server")

#: seconds the requests failed at the drain deadline get to end (to send their error), before the old model
#: is released anyway and then collected
_LATE_FINISH_S = 5.0


def estimate_bytes(model_id: str | None, revision: str | None, config) -> tuple[int, str]:
    """Bytes the model `model_id` needs in the engine settings `config` (weights in the serving dtype and a
    KV cache of `max_batch_total_tokens`), from its config alone, read without fetching a weight file or
    running any of its code (`tgi.server.swap.estimate`); and a short description."""
    from tgi.server.swap.estimate import model_bytes, read_model_config

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
        unfit = unfit_parsers(
            settings.reasoning_parser, settings.tool_call_parser, new.tokenizer.chat_template
        )
        if unfit is not None:  # the flags' parsers stay: a model they cannot read is not swapped in
            await asyncio.to_thread(new.engine.runner.shutdown)
            raise ApiError(422, f"cannot swap to the model: {unfit}", "validation")
        try:
            await new.start()
        except Exception as exc:  # the old model serves on; the new one's thread, weights and cache go
            await self._discard(new)
            raise logged_refusal(500, "cannot start the model", exc, "swap_failed") from None
        new.on_death = old.on_death
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

    async def _discard(self, engine) -> None:
        """Stop and release an engine that never served (its start failed)."""
        try:
            await engine.shutdown(cancel_inflight=True)
            await asyncio.to_thread(engine.close)
        except Exception:
            log.exception("the model whose start failed could not be released")

    async def _retire(self, engine) -> None:
        """Stop `engine` once its last admitted request has finished, or once `--swap-drain-timeout` has
        passed (the requests left end with an error that says why); then release its model and collect it
        (see the module docstring)."""
        timeout = self.service.settings.swap_drain_timeout_s
        deadline = time.monotonic() + timeout
        while self._users(engine) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        engine.on_death = None  # its thread ending now is no reason for the server to stop
        late = self._users(engine)
        if late:
            log.warning(
                "%d requests on %s did not finish within --swap-drain-timeout %gs: they end with an error",
                late,
                engine.model_id,
                timeout,
            )
            await engine.shutdown(cancel_inflight=True, reason=drain_deadline_message(timeout))
            deadline = time.monotonic() + _LATE_FINISH_S  # their handlers end as the error reaches them
            while self._users(engine) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        else:
            await engine.shutdown()
        try:
            await asyncio.to_thread(engine.close)  # weights, KV cache, worker processes, cached memory
        except Exception:
            log.exception("the previous model could not be released")
            return
        holders = self._users(engine)
        if not holders:
            self.service.users.pop(id(engine), None)
        gone = weakref.ref(engine)
        del engine
        deadline = time.monotonic() + _LATE_FINISH_S
        while gone() is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # handlers of failed requests hold it until their error is sent
        collect_released(gone, holders)
        if gone() is None:
            log.info("the previous model is stopped and freed")
        else:
            log.warning(
                "the previous model is stopped and its weights and KV cache released, but its engine object "
                "is still referenced (%d of its requests unfinished)",
                holders,
            )

    def _users(self, engine) -> int:
        """Requests admitted on `engine` that have not finished."""
        return self.service.users.get(id(engine), 0)


def drain_deadline_message(timeout_s: float) -> str:
    """What a request still running on a swapped-out model is told when its drain deadline passes."""
    return (
        "the model serving this request was swapped out (POST /admin/model) and the request did not finish "
        f"within the drain deadline (--swap-drain-timeout {timeout_s:g}s)"
    )


def collect_released(gone: weakref.ref, holders: int) -> None:
    """Collect a released engine (`gone`: swapped out, or unloaded from a `ModelPool`). A server freezes its start-up objects (`gc.freeze`,
    `tgi.server.cli.launch.freeze_loaded_objects`), out of the collector's reach: should a reference cycle
    of the old model be among them (none should: `tgi.core.lora.served_adapters`), one full collection with
    them included frees it. Then, as at start, the objects alive now (the new model's) are frozen."""
    gc.collect()
    frozen = gc.get_freeze_count() > 0
    if not frozen:
        return
    if gone() is not None and not holders:
        log.warning(
            "the previous model is in a reference cycle frozen at start: collecting it with a full pass"
        )
        gc.unfreeze()
        gc.collect()
    gc.freeze()
