"""The torch half of the backend contract: what a backend that runs core's torch models provides.

`TorchBackend` (device, attention kernels, KV storage, sampler, `torch.distributed` collectives) and the
interfaces of those parts; `TorchModelRunner` (`tgi.core.torch.runner`) runs core's model definitions on
them. Backends of other frameworks implement `tgi.core.interfaces` only.
"""

from tgi.core.torch.attention import AttentionBackend, AttentionMetadata
from tgi.core.torch.backend import TorchBackend
from tgi.core.torch.kv_cache import KVCache
from tgi.core.torch.sampler import Sampler, SamplerOutput

__all__ = ["AttentionBackend", "AttentionMetadata", "KVCache", "Sampler", "SamplerOutput", "TorchBackend"]
