"""The Gaudi KV cache: per layer, keys and values of every slot in one flat tensor, plus one pad slot."""

from __future__ import annotations

import torch

from tgi.core.dtypes import to_torch_dtype
from tgi.core.interfaces import KVCacheSpec
from tgi.core.torch.kv_cache import KVCache


class GaudiKVCache(KVCache):
    """Per layer, keys and values [num_slots + 1, num_kv_heads, head_dim] (slot = block * block_size +
    offset). The extra last slot, `pad_slot`, takes the writes of padding tokens: a static-shape step
    writes every token it has, so padding needs a slot of its own rather than a masked (shape-changing)
    write. Writes are `index_copy_` along the slot axis, which HPU graphs record in place."""

    def __init__(self, spec: KVCacheSpec, num_blocks: int, device: torch.device) -> None:
        super().__init__(spec, num_blocks)
        self.num_slots = num_blocks * spec.block_size
        self.pad_slot = self.num_slots
        shape = (spec.num_layers, 2, self.num_slots + 1, spec.num_kv_heads, spec.head_dim)
        self.storage = torch.zeros(shape, dtype=to_torch_dtype(spec.dtype), device=device)

    def write(
        self, layer_idx: int, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        slots = torch.where(slot_mapping < 0, self.pad_slot, slot_mapping).to(torch.int64)
        self.storage[layer_idx, 0].index_copy_(0, slots, key.to(self.storage.dtype))
        self.storage[layer_idx, 1].index_copy_(0, slots, value.to(self.storage.dtype))

    def layer(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values), each [num_slots, num_kv_heads, head_dim] (the pad slot left out)."""
        return self.storage[layer_idx, 0, : self.num_slots], self.storage[layer_idx, 1, : self.num_slots]

    def blocks(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values), each [num_blocks, block_size, num_kv_heads, head_dim]."""
        bs, (hkv, d) = self.spec.block_size, self.storage.shape[-2:]
        k, v = self.layer(layer_idx)
        return k.view(self.num_blocks, bs, hkv, d), v.view(self.num_blocks, bs, hkv, d)

    def nbytes(self) -> int:
        return self.storage.numel() * self.storage.element_size()
