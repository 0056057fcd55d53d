"""The contract between tgi's core and its hardware backends, whatever their framework.

Nothing here imports torch or jax: a backend of any framework implements `Backend` and its `ModelRunner`
with these types. What a torch backend provides beyond it (attention kernels, KV storage, a sampler on
torch tensors) is in `tgi.core.torch`; what sampling means is specified in `tgi.core.interfaces.sampling`.

Bump `INTERFACE_VERSION` on any incompatible change to these classes or to `tgi.core.torch`'s; the plugin
host refuses a backend built for another version, with a message naming both.
"""

from tgi.core.interfaces.backend import Backend
from tgi.core.interfaces.collective import Collective, SingleProcessCollective
from tgi.core.interfaces.quantization import (
    QUANTIZE_METHODS,
    WEIGHT_FORMATS,
    QuantizationInfo,
    QuantizationSpec,
)
from tgi.core.interfaces.runner import ModelInfo, ModelRunner
from tgi.core.interfaces.types import (
    DTYPES,
    AttentionCaps,
    AttentionLayerSpec,
    DeviceInfo,
    KVCacheSpec,
    MemoryInfo,
    ProbeResult,
    RunnerCapabilities,
    RunnerConstraints,
    UnsupportedError,
)

INTERFACE_VERSION = 2  # 2: the contract without torch (tgi.core.torch), create_runner(..., world_size)

__all__ = [
    "DTYPES",
    "INTERFACE_VERSION",
    "QUANTIZE_METHODS",
    "WEIGHT_FORMATS",
    "AttentionCaps",
    "AttentionLayerSpec",
    "Backend",
    "Collective",
    "DeviceInfo",
    "KVCacheSpec",
    "MemoryInfo",
    "ModelInfo",
    "ModelRunner",
    "ProbeResult",
    "QuantizationInfo",
    "QuantizationSpec",
    "RunnerCapabilities",
    "RunnerConstraints",
    "SingleProcessCollective",
    "UnsupportedError",
]
