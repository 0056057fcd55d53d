"""What the host CPU offers: name, cores, vector and matrix extensions, memory (Linux /proc)."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class CpuInfo:
    name: str
    cores: int  # cores this process may run on
    flags: frozenset[str]
    total_memory: int  # bytes
    available_memory: int  # bytes (MemAvailable)

    @property
    def has_amx_bf16(self) -> bool:
        return "amx_bf16" in self.flags

    @property
    def has_avx512_bf16(self) -> bool:
        return "avx512_bf16" in self.flags

    @property
    def has_native_bf16(self) -> bool:
        """bfloat16 products in hardware (AMX tiles or AVX512-BF16's dot products)."""
        return self.has_amx_bf16 or self.has_avx512_bf16

    def describe(self) -> str:
        feats = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in self.flags]
        return f"{self.name}, {self.cores} cores" + (f", {' '.join(feats)}" if feats else "")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def read_meminfo() -> tuple[int, int]:
    """(total, available) bytes."""
    values = {}
    for line in _read("/proc/meminfo").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[key] = int(parts[0]) * 1024
    total = values.get("MemTotal") or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return total, values.get("MemAvailable", total)


@lru_cache(maxsize=1)
def _static() -> tuple[str, frozenset[str]]:
    name, flags = platform.processor() or platform.machine(), frozenset()
    for line in _read("/proc/cpuinfo").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and name in ("", platform.machine(), platform.processor()):
            name = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return name, flags


def cpu_info() -> CpuInfo:
    name, flags = _static()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    total, available = read_meminfo()
    return CpuInfo(name, cores, flags, total, available)
