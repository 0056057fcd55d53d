"""The TPU backend: JAX devices (TPUs, or JAX's CPU devices when `TGI_JAX_PLATFORM=cpu` says so), their
memory, dtypes, and the JAX model runner (`runner.py`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tgi.backends.tpu import platform as plat
from tgi.core.interfaces import Backend, DeviceInfo, MemoryInfo, UnsupportedError

if TYPE_CHECKING:
    from tgi.core.config import EngineConfig
    from tgi.core.interfaces import ModelRunner
    from tgi.core.loading.source import ModelSource

#: `TGI_JAX_ATTENTION`: `reference` (pure JAX; the default on CPU devices) or `pallas` (our Pallas kernel;
#: the default on TPUs, in interpret mode on CPU devices: slow, for tests)
ATTENTION_ENV = "TGI_JAX_ATTENTION"


def _host_memory() -> MemoryInfo:
    values = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, rest = line.split(":", 1)
            values[key] = int(rest.split()[0]) * 1024
    return MemoryInfo(total=values["MemTotal"], free=values.get("MemAvailable", values["MemFree"]))


class TpuBackend(Backend):
    name = "tpu"

    def __init__(self, platform: str | None = None, cache_dir: str | None = None) -> None:
        """`platform`: "tpu" or "cpu" (default: `TGI_JAX_PLATFORM`, else "tpu"); `cache_dir`: the persistent
        compilation cache (default: `platform.cache_dir()`)."""
        self.platform = platform or plat.requested_platform()
        if self.platform not in plat.PLATFORMS:
            raise UnsupportedError(
                f"JAX platform {self.platform!r}: expected one of {', '.join(plat.PLATFORMS)}"
            )
        default = "pallas" if self.platform == "tpu" else "reference"
        self.attention_impl = os.environ.get(ATTENTION_ENV, "").strip().lower() or default
        if self.attention_impl not in ("reference", "pallas"):
            raise UnsupportedError(f"{ATTENTION_ENV}={self.attention_impl!r}: expected reference or pallas")
        self.notes: list[str] = []  # said at start-up (through describe_kernels)
        if self.platform == "cpu":
            self.kv_cache_memory_fraction = 0.3  # host memory, shared with the process and the OS
        self.cache_path = plat.enable_compilation_cache(cache_dir)

    # -- devices ----------------------------------------------------------------------------------------
    def prepare_devices(self, count: int) -> None:
        """Before JAX starts: enough CPU devices for `count` shards (TGI_JAX_PLATFORM=cpu only)."""
        if self.platform == "cpu":
            note = plat.ensure_cpu_devices(count)
            if note and note not in self.notes:
                self.notes.append(note)

    def jax_devices(self) -> list:
        return plat.devices(self.platform)

    def devices(self) -> list[DeviceInfo]:
        if self.platform == "cpu":  # without starting JAX: --num-shard may still set the device count
            return [DeviceInfo(0, f"JAX CPU devices ({plat.ENV}=cpu: not a TPU)", _host_memory().total)]
        out = []
        for d in self.jax_devices():
            stats = d.memory_stats() or {}
            out.append(DeviceInfo(d.id, f"{d.device_kind} {d.id}", stats.get("bytes_limit", 0)))
        return out

    def memory_info(self) -> MemoryInfo:
        if self.platform == "cpu":
            return _host_memory()
        free = total = None
        for d in self.jax_devices():  # the device with the least free memory
            stats = d.memory_stats() or {}
            limit, used = stats.get("bytes_limit", 0), stats.get("bytes_in_use", 0)
            if free is None or limit - used < free:
                free, total = limit - used, limit
        return MemoryInfo(total=total or 0, free=free or 0)

    def supported_dtypes(self) -> tuple[str, ...]:
        return ("float32", "bfloat16")

    def default_dtype(self) -> str:
        return "bfloat16" if self.platform == "tpu" else "float32"

    def default_dtype_reason(self) -> str:
        if self.platform == "tpu":
            return "TPUs compute in bfloat16"
        return "XLA emulates bfloat16 matmuls on this CPU"

    def describe_kernels(self, dtype: str) -> dict[str, str]:
        import jax

        if self.platform == "cpu":
            where = f"JAX {jax.__version__} on CPU devices ({plat.ENV}=cpu: not a TPU)"
        else:
            where = f"JAX {jax.__version__} on TPU"
        attention = {
            "reference": "pure JAX (XLA)",
            "pallas": "Pallas kernel"
            + (" in interpret mode" if self.platform != "tpu" else " (never run on a TPU here)"),
        }[self.attention_impl]
        out = {"platform": where, "attention": attention, "compilation cache": str(self.cache_path)}
        if self.notes:
            out["devices"] = "; ".join(self.notes)
        return out

    def create_runner(self, source: ModelSource, config: EngineConfig, world_size: int = 1) -> ModelRunner:
        from tgi.backends.tpu.runner import JaxModelRunner

        self.prepare_devices(world_size)
        if config.quantize:
            raise UnsupportedError(
                f"--quantize {config.quantize}: the tpu backend computes dense weights only"
            )
        return JaxModelRunner(self, source, config, world_size)
