"""How a server of several models loads one (`model_pool`): the engine settings of the first with the model's
own id, the memory check of a model swap, and the checks a launch makes of the first model."""

from __future__ import annotations

import dataclasses
from typing import Any

from tgi.core.config import EngineConfig
from tgi.server.chat.parsers import unfit_parsers
from tgi.server.http.errors import ApiError
from tgi.server.served_models.pool import ModelPool


def model_configs(first: EngineConfig, models: tuple[tuple[str, str], ...]) -> list[tuple[str, EngineConfig]]:
    """Each model's name and engine settings: the launch's (`first`, as the flags gave them, before a load
    derived its limits), with the model's own id (`models`: (name, model id) pairs)."""
    return [(name, dataclasses.replace(first, model_id=model_id)) for name, model_id in models]


def model_pool(service: Any, first_engine: Any, models: list[tuple[str, EngineConfig]]) -> ModelPool:
    """The pool of `service`'s models ((name, config) pairs); `first_engine` (loaded at launch) serves the
    first."""
    settings = service.settings
    backend = first_engine.engine.backend

    def load(config: EngineConfig) -> Any:
        from tgi.core.async_engine import AsyncEngine

        engine = AsyncEngine.from_config(config)
        unfit = unfit_parsers(
            settings.reasoning_parser, settings.tool_call_parser, engine.tokenizer.chat_template
        )
        if unfit is not None:  # the flags' parsers hold for every model
            engine.engine.runner.shutdown()
            raise ApiError(422, f"cannot serve the model {config.model_id}: {unfit}", "validation")
        return engine

    def fits(config: EngineConfig) -> str | None:
        from tgi.server.swap.swapper import estimate_bytes

        sized = dataclasses.replace(config, max_batch_total_tokens=first_engine.config.max_batch_total_tokens)
        try:
            need, what = estimate_bytes(config.model_id, config.revision, sized)
        except Exception:  # its config cannot be read: the load says why
            return None
        free = backend.memory_info().free * config.memory_fraction
        if need <= free:
            return None
        return f"it needs {need / 2**30:.2f} GiB ({what}), {free / 2**30:.2f} GiB are free"

    return ModelPool(
        models,
        first_engine,
        max_loaded=settings.max_loaded_models,
        keep_alive_s=settings.keep_alive_s,
        load=load,
        fits=fits,
        on_switch=service.switch_engine,
    )
