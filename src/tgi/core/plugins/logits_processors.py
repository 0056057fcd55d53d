"""Logits processor plugins by name (no torch here: a processor's own module imports what it needs when it
is loaded). The contract a processor meets is `tgi.core.sampling.logits_processor.LogitsProcessor`.

Each entry point of the group ``tgi.logits_processors`` is one processor: its name is the name the operator
enables (``--logits-processors``) and requests select, its object a processor class (constructed with no
arguments) or a callable with no arguments that returns a processor. Unlike backends (one pluggy hook
registering several specs), a processor is loaded only when its name is enabled: an installed plugin nobody
enables is never imported. Processors registered in code (`register`) sit beside the installed ones.

One registry per process (`logits_processors()`): the engine enables the launch's names at start-up, its
validation checks each request's choices against them, and the sampler looks them up by name.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from tgi.core.config import ConfigError
from tgi.core.plugins.registry import _describe

#: the entry-point group logits processors are installed in
ENTRY_POINT_GROUP = "tgi.logits_processors"


class LogitsProcessorRegistry:
    """The processors this process can run, loaded by name on first use."""

    def __init__(self, autoload: bool = True) -> None:
        self._autoload = autoload
        self._lock = threading.Lock()
        self._loaded: dict[str, Any] = {}

    def installed(self) -> dict[str, EntryPoint]:
        """The entry points of `ENTRY_POINT_GROUP`, by name (empty without autoload)."""
        if not self._autoload:
            return {}
        return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}

    def names(self) -> list[str]:
        """Every name a processor can be enabled by: installed or registered in code."""
        with self._lock:
            registered = set(self._loaded)
        return sorted(registered | set(self.installed()))

    def register(self, name: str, processor: Any) -> None:
        """Make `processor` (a `LogitsProcessor`) available as `name` in this process. `ConfigError` when
        the name is taken by another object."""
        _check_processor(name, processor)
        with self._lock:
            if self._loaded.get(name, processor) is not processor:
                raise ConfigError(f"logits processor name {name!r} is already registered")
            self._loaded[name] = processor

    def get(self, name: str) -> Any:
        """The processor `name`, loaded from its entry point the first time; `ConfigError` saying why when
        there is none by that name or it cannot be loaded."""
        with self._lock:
            found = self._loaded.get(name)
        if found is not None:
            return found
        ep = self.installed().get(name)
        if ep is None:
            known = ", ".join(self.names()) or "none is installed"
            raise ConfigError(
                f"unknown logits processor {name!r} (installed in the entry-point group "
                f"{ENTRY_POINT_GROUP!r}: {known})"
            )
        try:
            processor = ep.load()()
        except Exception as exc:  # a broken plugin is reported with its reason, never swallowed
            raise ConfigError(
                f"logits processor {name!r} ({ep.value}) failed to load: {_describe(exc)}"
            ) from exc
        _check_processor(name, processor)
        with self._lock:
            return self._loaded.setdefault(name, processor)

    def enable(self, names: Iterable[str]) -> tuple[str, ...]:
        """Load every one of `names` now (at start-up: a name that cannot run stops the start, saying why);
        returns them."""
        names = tuple(names)
        for name in names:
            self.get(name)
        return names


def _check_processor(name: str, processor: Any) -> None:
    missing = [m for m in ("apply", "validate_args") if not callable(getattr(processor, m, None))]
    if missing:
        raise ConfigError(
            f"logits processor {name!r} is a {type(processor).__name__}, not a LogitsProcessor "
            f"(no {', '.join(missing)})"
        )


@cache
def logits_processors() -> LogitsProcessorRegistry:
    """This process's registry."""
    return LogitsProcessorRegistry()
