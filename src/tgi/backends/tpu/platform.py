"""Which JAX platform the TPU backend runs on, said once and never changed behind the user's back.

* Without `TGI_JAX_PLATFORM`, the backend needs TPU devices: `probe()` says it is unavailable otherwise
  (with the reason), and nothing falls back to another platform.
* `TGI_JAX_PLATFORM=cpu` explicitly runs the same backend on JAX's CPU devices (development and CI). The
  number of CPU devices comes from `XLA_FLAGS=--xla_force_host_platform_device_count=N`, or, when JAX is not
  initialised yet, from `--num-shard` (`ensure_cpu_devices`), which the start-up line states.
* `TGI_JAX_PLATFORM=tpu` is the default spelled out; any other value is refused.

JAX's persistent compilation cache is on (`enable_compilation_cache`): `TGI_JAX_CACHE_DIR`, else
`$XDG_CACHE_HOME/tgi/jax` (`~/.cache/tgi/jax`), so a restart reuses the warm-up's executables.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ENV = "TGI_JAX_PLATFORM"
CACHE_ENV = "TGI_JAX_CACHE_DIR"
PLATFORMS = ("tpu", "cpu")


class PlatformError(RuntimeError):
    """The platform asked for cannot be used; the message says why."""


def requested_platform() -> str:
    """`tpu` (the default) or `cpu` (only when `TGI_JAX_PLATFORM=cpu`); `PlatformError` for another value."""
    value = os.environ.get(ENV, "").strip().lower() or "tpu"
    if value not in PLATFORMS:
        raise PlatformError(f"{ENV}={value!r}: expected one of {', '.join(PLATFORMS)}")
    return value


def forced_cpu_devices() -> int | None:
    """The CPU device count `XLA_FLAGS` forces, if any."""
    m = re.search(r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(m.group(1)) if m else None


def _initialised() -> bool:
    from jax._src import xla_bridge

    return bool(xla_bridge._backends)


def ensure_cpu_devices(count: int) -> str:
    """Make at least `count` JAX CPU devices available (before JAX initialises its backends), or raise
    `PlatformError` saying how; returns a note for the start-up line ("" when nothing was changed)."""
    import jax

    forced = forced_cpu_devices()
    if forced is not None:
        if forced < count:
            raise PlatformError(
                f"--num-shard {count} needs {count} JAX CPU devices; XLA_FLAGS forces {forced} "
                f"(--xla_force_host_platform_device_count={count})"
            )
        return ""
    if count <= 1:
        return ""
    if _initialised():
        have = len(jax.devices("cpu"))
        if have < count:
            raise PlatformError(
                f"--num-shard {count} needs {count} JAX CPU devices, JAX was started with {have}: set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={count} before starting"
            )
        return ""
    jax.config.update("jax_num_cpu_devices", count)
    return f"{count} JAX CPU devices for --num-shard {count}"


def devices(platform: str) -> list:
    """JAX's devices of `platform`; `PlatformError` when there are none (never another platform's)."""
    import jax

    try:
        found = jax.devices(platform)
    except RuntimeError as exc:
        raise PlatformError(f"no JAX {platform} devices: {exc}") from None
    if not found:
        raise PlatformError(f"no JAX {platform} devices")
    return found


def cache_dir() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tgi" / "jax"


def enable_compilation_cache(path: str | Path | None = None) -> Path:
    """Turn on JAX's persistent compilation cache in `path` (default: `cache_dir()`), for every executable
    however quick to compile."""
    import jax

    path = Path(path) if path else cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
