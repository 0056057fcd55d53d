"""Paged KV cache in device memory, written by the Triton `reshape_and_cache` kernel."""

from __future__ import annotations

import torch

from tgi.core.dtypes import to_torch_dtype
from tgi.core.interfaces import KVCacheSpec
from tgi.core.torch.kv_cache import KVCache


class TritonKVCache(KVCache):
    """All layers in one allocation [num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim].

    Per layer, keys and values are [num_blocks, block_size, num_kv_heads, head_dim] views (head_dim
    contiguous): the layout the Triton kernels read, and the "NHD" paged layout of flash-attn and
    FlashInfer. One allocation avoids fragmenting device memory across 2 * num_layers tensors. The storage
    is zero-initialised: kernels may read (and mask out) never-written slots, which must hold finite values.
    """

    def __init__(self, spec: KVCacheSpec, num_blocks: int, device: torch.device | str) -> None:
        super().__init__(spec, num_blocks)
        self.dtype = to_torch_dtype(spec.dtype)
        self.device = torch.device(device)
        shape = (spec.num_layers, 2, num_blocks, spec.block_size, spec.num_kv_heads, spec.head_dim)
        self.storage = torch.zeros(shape, dtype=self.dtype, device=self.device)

    def write(
        self, layer_idx: int, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        from tgi.backends.triton_common.kernels import reshape_and_cache

        key_cache, value_cache = self.layer(layer_idx)
        reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)

    def layer(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(key_cache, value_cache), each [num_blocks, block_size, num_kv_heads, head_dim]."""
        return self.storage[layer_idx, 0], self.storage[layer_idx, 1]

    def nbytes(self) -> int:
        return self.storage.numel() * self.storage.element_size()
