"""The CPU backend: the reference every test runs, and a fast path for AVX-512/AMX machines."""

from __future__ import annotations

import os

import torch

from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.core.interfaces import (
    AttentionBackend,
    Collective,
    DeviceInfo,
    KVCache,
    KVCacheSpec,
    MemoryInfo,
    TorchBackend,
)


class CpuBackend(TorchBackend):
    name = "cpu"
    process_group_backend = "gloo"
    # host memory is shared with the OS and every other process: without --max-batch-total-tokens the KV
    # cache takes a quarter of the available memory (on 24 GiB, ~5 GiB: ~220k tokens of the default model)
    kv_cache_memory_fraction = 0.25

    def __init__(self, num_threads: int | None = None) -> None:
        self._info = cpu_info()
        # one intra-op thread per core we may run on (more only adds contention with the server's threads),
        # unless the user asked for a number with OMP_NUM_THREADS
        env_threads = os.environ.get("OMP_NUM_THREADS", "")
        torch.set_num_threads(
            num_threads or (int(env_threads) if env_threads.isdigit() else 0) or self._info.cores
        )
        self._attention: AttentionBackend | None = None

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(0, self._info.describe(), self._info.total_memory)]

    def memory_info(self) -> MemoryInfo:
        info = cpu_info()
        return MemoryInfo(total=info.total_memory, free=info.available_memory)

    def supported_dtypes(self) -> tuple[str, ...]:
        return ("float32", "bfloat16")

    def default_dtype(self) -> str:
        # bfloat16 matrix products run on AMX (or AVX512-BF16); without them float32 is faster and exact
        return "bfloat16" if self._info.has_amx_bf16 else "float32"

    def torch_device(self) -> torch.device:
        return torch.device("cpu")

    def prepare_model(self, model: torch.nn.Module) -> None:
        from tgi.backends.cpu.linear import prepack_linears, prepacking_supported

        # bfloat16 products run on AMX / AVX-512-BF16 through oneDNN: pack their weights once
        # (TGI_CPU_PREPACK=0 turns it off, to compare)
        if (
            self._info.has_avx512_bf16
            and prepacking_supported()
            and os.environ.get("TGI_CPU_PREPACK", "1") != "0"
        ):
            prepack_linears(model)

    def attention(self) -> AttentionBackend:
        if self._attention is None:
            from tgi.backends.cpu.attention import CpuAttention

            self._attention = CpuAttention()
        return self._attention

    def create_kv_cache(self, spec: KVCacheSpec, num_blocks: int) -> KVCache:
        from tgi.backends.cpu.kv_cache import CpuKVCache

        return CpuKVCache(spec, num_blocks)

    def create_collective(self, rank: int, world_size: int, init_method: str | None = None) -> Collective:
        if world_size > 1:  # the ranks share this machine's cores
            torch.set_num_threads(max(1, self._info.cores // world_size))
        return super().create_collective(rank, world_size, init_method)
