"""A model swapped out is collected: the launcher's real path (`run_launch`: the app, uvicorn, and the
start-up `gc.freeze` of `freeze_loaded_objects`), in this process so that a `weakref` can watch the
engines. After a swap, and after a swap back, the engine swapped out (`AsyncEngine` and its `LLMEngine`,
served with a LoRA adapter, whose kernels wrap the model's linears) is gone; the one serving is not. (The
memory itself, seen from outside: tests/e2e/test_model_swap_memory_e2e.py.)"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import threading
import time
import weakref

import httpx

from tgi.core.async_engine import AsyncEngine
from tgi.core.testing.lora import write_random_lora
from tgi.core.testing.tiny_models import save_random_model
from tgi.server.cli.launch import add_launch_arguments, run_launch

ADMIN = {"Authorization": "Bearer swap-admin-key"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_swapped_out_engine_is_collected(monkeypatch, tmp_path, capsys):
    a = save_random_model(tmp_path / "a", max_position_embeddings=1024, init_std=0.5)
    b = save_random_model(tmp_path / "b", max_position_embeddings=1024, init_std=0.5, seed=1)
    adapter = write_random_lora(tmp_path / "adapter", a)
    engines: list[tuple[str, weakref.ref, weakref.ref]] = []  # (model, AsyncEngine, LLMEngine), in order
    load = AsyncEngine.from_config.__func__

    def recording(cls, config, progress=None, registry=None):
        engine = load(cls, config, progress, registry)
        engines.append((config.model_id, weakref.ref(engine), weakref.ref(engine.engine)))
        return engine

    monkeypatch.setattr(AsyncEngine, "from_config", classmethod(recording))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    args = parser.parse_args(
        ["--model-id", str(a), "--hostname", "127.0.0.1", "--port", str(port),
         "--max-batch-total-tokens", "2048", "--max-total-tokens", "512", "--lora-adapters", f"ad={adapter}",
         "--admin-api-key", ADMIN["Authorization"][7:], "--enable-model-swap",
         "--swappable-models", f"{a},{b}"]
    )  # fmt: skip
    failures: list[BaseException] = []

    def alive(index: int) -> bool:
        return any(ref() is not None for ref in engines[index][1:])

    def drive() -> None:
        try:
            wait_until(lambda: _healthy(url), "the server did not start")
            body = {"inputs": "w5 w6", "parameters": {"max_new_tokens": 4, "adapter_id": "ad"}}
            assert httpx.post(url + "/generate", json=body, timeout=60).status_code == 200
            for step, model in enumerate((b, a)):
                r = httpx.post(
                    url + "/admin/model", json={"model_id": str(model)}, headers=ADMIN, timeout=120
                )
                assert r.status_code == 200, r.text
                assert httpx.post(url + "/generate", json=body, timeout=60).status_code == 200
                wait_until(lambda s=step: not alive(s), f"engine {step} ({engines[step][0]}) is still alive")
                assert alive(step + 1)  # the one serving
        except BaseException as exc:  # reported in the test's own thread
            failures.append(exc)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # uvicorn stops gracefully, run_launch returns

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    # should the server not start, the driver's SIGTERM is a no-op
    signal.signal(signal.SIGTERM, lambda *_: None)
    driver = threading.Thread(target=drive)
    driver.start()
    try:
        code = run_launch(args)
    finally:
        driver.join(300)
        gc.unfreeze()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if failures:
        raise failures[0]
    assert code == 0
    assert [model for model, *_ in engines] == [str(a), str(b), str(a)]
    log = capsys.readouterr().err
    assert log.count("the previous model is stopped and freed") == 2
    assert "reference cycle" not in log  # freed by reference counting alone: no cycle was frozen at start


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
