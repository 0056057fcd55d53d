"""The contract between tgi's core and its hardware backends.

Bump `INTERFACE_VERSION` on any incompatible change to these classes; the plugin host refuses a backend
built for another version, with a message naming both.
"""

from tgi.core.interfaces.attention import (
    AttentionBackend,
    AttentionLayerSpec,
    AttentionMetadata,
    UnsupportedError,
)
from tgi.core.interfaces.backend import Backend, TorchBackend
from tgi.core.interfaces.collective import Collective, SingleProcessCollective
from tgi.core.interfaces.kv_cache import KVCache
from tgi.core.interfaces.runner import ModelInfo, ModelRunner
from tgi.core.interfaces.sampler import Sampler, SamplerOutput
from tgi.core.interfaces.types import (
    DTYPES,
    AttentionCaps,
    DeviceInfo,
    KVCacheSpec,
    MemoryInfo,
    ProbeResult,
    RunnerConstraints,
)

INTERFACE_VERSION = 1

__all__ = [
    "DTYPES",
    "INTERFACE_VERSION",
    "AttentionBackend",
    "AttentionCaps",
    "AttentionLayerSpec",
    "AttentionMetadata",
    "Backend",
    "Collective",
    "DeviceInfo",
    "KVCache",
    "KVCacheSpec",
    "MemoryInfo",
    "ModelInfo",
    "ModelRunner",
    "ProbeResult",
    "RunnerConstraints",
    "Sampler",
    "SamplerOutput",
    "SingleProcessCollective",
    "TorchBackend",
    "UnsupportedError",
]
