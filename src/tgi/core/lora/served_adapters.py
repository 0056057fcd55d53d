"""The LoRA adapters an engine serves, changed at run time (`POST /v1/load_lora_adapter`, `unload`): which
ids requests may name, each one's prefix-cache key, and who still uses one being unloaded. No torch here:
the runner holds the weights (`ModelRunner.load_lora_adapter`).

Contract: the thread that steps the engine calls `load`, `retire` and `unload`, between steps. `retire`
stops new requests from naming an adapter (`/v1/models` drops it, `adapter_id` validation refuses it) while
those in flight keep it; `unload` drops its weights once none is left (`users`), and refuses before.
Every load of an id gets a new prefix-cache key: an id unloaded and loaded again with other weights never
reads the KV blocks its earlier weights wrote.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from tgi.core.config import ConfigError

#: the id OpenAI clients send for the base model (`tgi.server.lora.adapters.BASE_ALIAS`): never an adapter's
RESERVED = "tgi"


class LoRALimitError(ConfigError):
    """A load beyond `--max-loras`; `reason` (the message: it names no path) is what a client may be told."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.reason = message


class AdapterInUseError(RuntimeError):
    """Requests of the adapter are unfinished: it cannot be unloaded yet."""


class ServedAdapters:
    """The adapters of one `LLMEngine` (see the module docstring). It holds its engine weakly: the engine
    owns it, and a reference cycle between them would keep a swapped-out model alive once the server has
    frozen the objects of its start-up (`gc.freeze`), out of the collector's reach."""

    def __init__(self, engine: Any, names: tuple[str, ...]) -> None:
        self._engine = weakref.proxy(engine)
        self._loads = 0
        self._keys = {name: self._new_key(name) for name in names}

    def _new_key(self, name: str) -> bytes:
        self._loads += 1
        return b"lora:%d:" % self._loads + name.encode()

    @property
    def loaded(self) -> tuple[str, ...]:
        """Every adapter whose weights are loaded, retired ones included."""
        return tuple(self._keys)

    @property
    def served(self) -> tuple[str, ...]:
        """The adapters new requests may name."""
        return self._engine.limits.lora_adapters

    def cache_key(self, name: str) -> bytes:
        """The prefix-cache key of adapter `name`'s blocks (this load of it)."""
        return self._keys[name]

    def _serve(self, names: tuple[str, ...]) -> None:
        engine = self._engine
        engine.model_info = dataclasses.replace(engine.model_info, lora_adapters=names)
        engine.limits = dataclasses.replace(engine.limits, lora_adapters=names)

    def load(self, name: str, path: str) -> None:
        """Serve the PEFT adapter in folder `path` as `name` from the next step on. `ValueError` for an id in
        use or reserved; `LoRALimitError` when `max_loras` adapters are loaded already (retired ones whose
        requests are unfinished count); `ConfigError` (`AdapterError`) with the reason for an adapter that does
        not fit the model, or when the runner cannot load adapters at run time."""
        engine = self._engine
        if not engine.runner.capabilities().lora_runtime_loading:
            raise ConfigError("this backend's runner does not load LoRA adapters at run time")
        if name in self._keys:
            raise ValueError(f"the LoRA adapter '{name}' is loaded already (unload it first)")
        if not name or name == RESERVED:
            raise ValueError(f"'{name}' cannot name a LoRA adapter (reserved)")
        limit = engine.config.max_loras
        if len(self._keys) >= limit:
            raise LoRALimitError(
                f"{len(self._keys)} LoRA adapters are loaded, as many as --max-loras {limit}"
            )
        engine.runner.load_lora_adapter(name, path)
        self._keys[name] = self._new_key(name)
        self._serve((*self.served, name))

    def retire(self, name: str) -> None:
        """New requests may no longer name adapter `name` (KeyError when it is not served)."""
        if name not in self.served:
            raise KeyError(name)
        self._serve(tuple(n for n in self.served if n != name))

    def users(self, name: str) -> int:
        """Unfinished requests (waiting or running) of adapter `name`."""
        scheduler = self._engine.scheduler
        return sum(1 for s in (*scheduler.waiting, *scheduler.running) if s.params.adapter_id == name)

    def unload(self, name: str) -> None:
        """Drop adapter `name` (retiring it first if it is still served). KeyError when it is not loaded,
        `AdapterInUseError` while requests of it are unfinished."""
        if name not in self._keys:
            raise KeyError(name)
        users = self.users(name)
        if users:
            raise AdapterInUseError(f"the LoRA adapter '{name}' is in use by {users} unfinished requests")
        if name in self.served:
            self.retire(name)
        self._engine.runner.unload_lora_adapter(name)
        del self._keys[name]
