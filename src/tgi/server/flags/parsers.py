"""Reading flag values: the environment (`env`) and the strings that need more than `int` or `float`. A parser
takes the string given on the command line or in the variable and returns the value, or raises
`argparse.ArgumentTypeError` (argparse then names the flag and exits 2)."""

from __future__ import annotations

import argparse
import os
import re


def env(*names: str, default=None):
    """The first of `names` set (non-empty) in the environment, else `default`."""
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return value
    return default


def on_off(value) -> bool:
    """An on/off value: true/false, 1/0, yes/no, on/off (any case); anything else is an error."""
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def batch_sizes(value: str) -> tuple[int, ...]:
    """`--cuda-graphs`: comma-separated batch sizes; "0" (or nothing) turns graphs off: ()."""
    try:
        sizes = tuple(int(v) for v in str(value).split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected batch sizes such as 1,2,4,8, got {value!r}") from None
    if any(s < 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"batch sizes must be >= 0, got {value!r}")
    return tuple(sorted({s for s in sizes if s > 0}))


def comma_list(value: str) -> tuple[str, ...]:
    """`a, b,,c` -> ("a", "b", "c"): the items, stripped, empty ones dropped."""
    return tuple(item.strip() for item in str(value).split(",") if item.strip())


def port_list(value: str) -> tuple[int, ...]:
    """`8080, 8443` -> (8080, 8443): TCP ports (1 to 65535), comma-separated; anything else is an error."""
    items = comma_list(value)
    if not all(item.isascii() and item.isdigit() and 1 <= int(item) <= 65535 for item in items):
        raise argparse.ArgumentTypeError(f"expected ports (1-65535) such as 8080,8443, got {value!r}")
    return tuple(int(item) for item in items)


def lower(value: str) -> str:
    """The value in lower case (choices compared without regard to case, as TGI's variables are written)."""
    return str(value).lower()


def kv_events_config(value: str):
    """`--kv-events-config`: vLLM's KVEventsConfig as a JSON object (`tgi.core.kv_events.KVEventsConfig`)."""
    from tgi.core.config import ConfigError
    from tgi.core.kv_events.events import KVEventsConfig

    try:
        return KVEventsConfig.from_json(value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--kv-events-config: ")) from None


# Go's time.ParseDuration units (Ollama's durations), in seconds
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+$")
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def duration_seconds(value: str) -> float:
    """A number of seconds, or a Go duration as Ollama writes them (`5m`, `-1h30m`, `90s`), in seconds;
    `ValueError` otherwise."""
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    if not _DURATION.match(text):
        raise ValueError(f"not a number of seconds or a duration such as 5m: {value!r}")
    sign = -1.0 if text.startswith("-") else 1.0
    return sign * sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))


def duration_value(value: object) -> float | None:
    """A JSON duration (Ollama's `keep_alive`) in seconds: None when absent, a number as seconds, a string as
    `duration_seconds` reads it; `ValueError` for anything else (a boolean included)."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return duration_seconds(value)
    raise ValueError(f"not a number of seconds or a duration such as 5m: {value!r}")


def keep_alive(value: str) -> float:
    """`--keep-alive`: `duration_seconds`, as an argparse type."""
    try:
        return duration_seconds(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
