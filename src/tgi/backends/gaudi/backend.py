"""`GaudiBackend`: core's torch models on an Intel Gaudi HPU, every Gaudi call through an `HpuDevice`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from tgi.core.config import ConfigError
from tgi.core.interfaces import Collective, DeviceInfo, KVCacheSpec, MemoryInfo
from tgi.core.interfaces.collective import SingleProcessCollective
from tgi.core.torch import AttentionBackend, KVCache, TorchBackend

if TYPE_CHECKING:
    import torch

    from tgi.backends.gaudi.device import HpuDevice
    from tgi.core.config import EngineConfig
    from tgi.core.interfaces import ModelRunner
    from tgi.core.loading.source import ModelSource


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class BucketSizes:
    """TGI Gaudi's bucket steps, from its environment variables (same names, same defaults)."""

    batch: int = 8  # BATCH_BUCKET_SIZE: decode batches pad to a multiple of it
    prefill_batch: int = 4  # PREFILL_BATCH_BUCKET_SIZE: prefill batches pad to a multiple of it
    sequence: int = 128  # PAD_SEQUENCE_TO_MULTIPLE_OF: prefill chunks pad to a multiple of it

    @classmethod
    def from_env(cls) -> BucketSizes:
        return cls(
            _env_int("BATCH_BUCKET_SIZE", cls.batch),
            _env_int("PREFILL_BATCH_BUCKET_SIZE", cls.prefill_batch),
            _env_int("PAD_SEQUENCE_TO_MULTIPLE_OF", cls.sequence),
        )


class GaudiBackend(TorchBackend):
    """One Gaudi per rank: the `hpu` torch device, Gaudi's fused SDPA over a gathered paged context, static
    row-shaped steps with an HPU graph per decode bucket (`runner.py`), `hccl` collectives.

    :param device: the `HpuDevice` (default: `HabanaDevice`, over habana_frameworks)
    :param buckets: bucket steps (default: `BucketSizes.from_env()`)
    """

    name: ClassVar[str] = "gaudi"
    process_group_backend: ClassVar[str] = "hccl"
    #: bytes of device memory left out of the KV cache (activations of the largest bucket, graphs)
    memory_margin: ClassVar[int] = 2 << 30

    def __init__(self, device: HpuDevice | None = None, buckets: BucketSizes | None = None) -> None:
        if device is None:
            from tgi.backends.gaudi.device import HabanaDevice

            device = HabanaDevice()
        self.hpu = device
        self.buckets = buckets or BucketSizes.from_env()
        self.attention_name = "gaudi-sdpa"

    def torch_device(self) -> torch.device:
        return self.hpu.torch_device()

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(0, self.hpu.device_name(), self.hpu.memory()[1])]

    def memory_info(self) -> MemoryInfo:
        free, total = self.hpu.memory()
        return MemoryInfo(total=total, free=max(0, free - self.memory_margin))

    def synchronize(self) -> None:
        self.hpu.synchronize()

    def supported_dtypes(self) -> tuple[str, ...]:
        return ("bfloat16", "float32", "float16")

    def default_dtype(self) -> str:
        return "bfloat16"

    def describe_kernels(self, dtype: str) -> dict[str, str]:
        b = self.buckets
        return {
            "attention": "Gaudi FusedSDPA over the paged context gathered by block table",
            "decode": f"an HPU graph per decode bucket (BATCH_BUCKET_SIZE {b.batch})",
            "prefill": (
                f"lazy mode, a recipe per bucket (PREFILL_BATCH_BUCKET_SIZE {b.prefill_batch}, "
                f"PAD_SEQUENCE_TO_MULTIPLE_OF {b.sequence})"
            ),
        }

    def create_attention(self, name: str) -> AttentionBackend:
        from tgi.backends.gaudi.attention import GaudiAttention

        return GaudiAttention(self.hpu)

    def create_kv_cache(self, spec: KVCacheSpec, num_blocks: int) -> KVCache:
        from tgi.backends.gaudi.kv_cache import GaudiKVCache

        return GaudiKVCache(spec, num_blocks, self.torch_device())

    def create_collective(self, rank: int, world_size: int, init_method: str | None = None) -> Collective:
        """`torch.distributed` with the `hccl` group that habana_frameworks registers (no device id: Gaudi
        binds one device per process itself)."""
        if world_size == 1:
            return SingleProcessCollective()
        from tgi.core.parallel.collective import TorchDistributedCollective

        name = self.hpu.init_collectives()
        return TorchDistributedCollective(name, rank, world_size, init_method, device=None)

    def create_rank_runner(
        self, source: ModelSource, config: EngineConfig, collective: Collective
    ) -> ModelRunner:
        from tgi.backends.gaudi.runner import GaudiModelRunner

        return GaudiModelRunner(self, source, config, collective)
