"""`AsyncEngine.from_config` tells the backend, in the thread that loaded the model, that its own thread will
step it from now on (`Backend.release_loading_thread`): at start-up and for a model swap alike."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from tgi.core import async_engine
from tgi.core.async_engine import AsyncEngine
from tgi.core.config import EngineConfig


class _Backend:
    name = "fake"

    def __init__(self) -> None:
        self.released_in: list[int] = []

    def release_loading_thread(self) -> None:
        self.released_in.append(threading.get_ident())


def test_the_loading_thread_is_released_once_loaded(monkeypatch):
    backend = _Backend()
    loaded_in = []

    def load(config, registry=None, progress=None):
        loaded_in.append(threading.get_ident())
        return SimpleNamespace(backend=backend, config=config)

    monkeypatch.setattr(async_engine.LLMEngine, "from_config", staticmethod(load))
    engines = []
    thread = threading.Thread(
        target=lambda: engines.append(AsyncEngine.from_config(EngineConfig(model_id="m")))
    )
    thread.start()
    thread.join()
    assert engines[0].engine.backend is backend
    assert backend.released_in == loaded_in == [thread.ident]
