"""The contract between tgi's core and its hardware backends, whatever their framework.

Nothing here imports torch or jax: a backend of any framework implements `Backend` and its `ModelRunner`
with these types. What a torch backend provides beyond it (attention kernels, KV storage, a sampler on
torch tensors) is in `tgi.core.torch`; what sampling means is specified in `tgi.core.interfaces.sampling`;
what the scheduler hands a runner each step and what comes back (`ScheduledBatch`, `StepOutput`, ...) is in
`tgi.core.interfaces.batch`.

`INTERFACE_VERSION` versions this whole folder (every module under `tgi.core.interfaces`, their import paths
included) and `tgi.core.torch`: bump it on any incompatible change to either; the plugin host refuses a
backend built for another version, with a message naming both.
"""

from tgi.core.interfaces.backend import Backend
from tgi.core.interfaces.collective import Collective, SingleProcessCollective
from tgi.core.interfaces.pooling import POOLING_MODES, PoolingSpec
from tgi.core.interfaces.quantization import (
    QUANTIZE_METHODS,
    WEIGHT_FORMATS,
    QuantizationInfo,
    QuantizationSpec,
)
from tgi.core.interfaces.runner import DoneStep, ModelInfo, ModelRunner, StepHandle
from tgi.core.interfaces.types import (
    DTYPES,
    KV_CACHE_DTYPES,
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

# 2: the contract without torch (tgi.core.torch), create_runner(..., world_size)
# 3: the batch and step types moved into the contract: `tgi.core.interfaces.batch` (was `tgi.core.batch`)
# 4: pooling models: `PoolingSpec`, `ScheduledSequence.pool`, `StepOutput.pooled`, `RunnerCapabilities.pooling`
# 5: classifiers: `PoolingSpec.kind` ("embed" | "classify"), `labels`, `activation`; a classifier's pooled
#    output is its head's logits
# 6: token embeddings (TEI's /embed_all): `ScheduledSequence.token_embeddings`, `StepOutput.token_embeddings`,
#    `RunnerCapabilities.token_embeddings`
# 7: sparse embedders (SPLADE): `PoolingSpec.kind` "sparse", pooled from the model's `token_logits`
INTERFACE_VERSION = 7

__all__ = [
    "DTYPES",
    "INTERFACE_VERSION",
    "KV_CACHE_DTYPES",
    "POOLING_MODES",
    "QUANTIZE_METHODS",
    "WEIGHT_FORMATS",
    "AttentionCaps",
    "AttentionLayerSpec",
    "Backend",
    "Collective",
    "DeviceInfo",
    "DoneStep",
    "KVCacheSpec",
    "MemoryInfo",
    "ModelInfo",
    "ModelRunner",
    "PoolingSpec",
    "ProbeResult",
    "QuantizationInfo",
    "QuantizationSpec",
    "RunnerCapabilities",
    "RunnerConstraints",
    "SingleProcessCollective",
    "StepHandle",
    "UnsupportedError",
]
