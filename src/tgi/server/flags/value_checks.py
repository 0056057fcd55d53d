"""Checks of one flag's value, run at start before the model loads (`tgi.server.flags.checks`): each takes the
parsed value and returns what is wrong with it, said after the flag's name, or None when it is fine (None, the
value of a flag not given, is always fine)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable


def positive(value) -> str | None:
    if value is not None and value <= 0:
        return f"must be > 0, got {value}"
    return None


def fraction(value) -> str | None:
    if value is not None and not 0 < value <= 1:
        return f"must be in (0, 1], got {value}"
    return None


def deadline(value) -> str | None:
    """A number of seconds that is a deadline: > 0 and finite."""
    if value is not None and not 0 < value < math.inf:
        return f"must be a number of seconds > 0, got {value}"
    return None


def drain_time(value) -> str | None:
    """A number of seconds, 0 meaning at once."""
    if value is not None and (not math.isfinite(value) or value < 0):
        return f"must be a number of seconds >= 0, got {value}"
    return None


def key(variable: str, advice: str) -> Callable[[object], str | None]:
    """An API key: given empty (or blank) it is refused, never read as "no key"."""

    def check(value) -> str | None:
        if value is not None and not value.strip():
            return f"(or {variable}) is empty: {advice}"
        return None

    return check


def model_list(value) -> str | None:
    if value == ():
        return "is empty: list model ids, or leave it unset"
    return None


def otlp_endpoint(value) -> str | None:
    if value is None:
        return None
    if not value.startswith(("http://", "https://")):
        return f"must be an http:// or https:// URL, got {value!r}"
    if not _otel_installed(value):
        return "needs the OpenTelemetry SDK and exporter: pip install 'tgi[otel]'"
    return None


def tokenizer_config_file(path) -> str | None:
    """A tokenizer_config.json that can be read and has a `chat_template` (the one thing taken from it)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as exc:
        return f"{path}: {exc}"
    if not isinstance(config, dict) or not config.get("chat_template"):
        return f"{path}: no chat_template in it"
    return None


def _otel_installed(endpoint: str) -> bool:
    import importlib.util

    from tgi.server.observability.tracing import exporter_module, otlp_protocol

    try:
        return all(
            importlib.util.find_spec(m) is not None
            for m in ("opentelemetry.sdk.trace", exporter_module(otlp_protocol(endpoint)))
        )
    except ModuleNotFoundError:  # a parent package is missing
        return False
