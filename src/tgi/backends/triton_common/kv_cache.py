"""Paged KV cache in device memory, written by the Triton `reshape_and_cache` kernel (a quantized cache's by
`kernels.kv_quant.quantize_into_cache`)."""

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

    A quantized cache (`spec.kv_dtype` int8, fp8_e4m3fn, fp8_e5m2) stores the same layout in bytes (the codes)
    and beside it the scales [num_layers, 2, num_blocks, block_size, num_kv_heads] float32 (`scales`): one per
    token and kv head, computed when the token is written, or the checkpoint's per layer (float8).
    """

    def __init__(self, spec: KVCacheSpec, num_blocks: int, device: torch.device | str) -> None:
        super().__init__(spec, num_blocks)
        self.dtype = torch.uint8 if spec.quantized else to_torch_dtype(spec.dtype)
        self.device = torch.device(device)
        shape = (spec.num_layers, 2, num_blocks, spec.block_size, spec.num_kv_heads, spec.head_dim)
        self.storage = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.scale_storage = (
            torch.zeros(shape[:-1], dtype=torch.float32, device=self.device) if spec.quantized else None
        )

    def write(
        self, layer_idx: int, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        key_cache, value_cache = self.layer(layer_idx)
        if self.spec.quantized:
            from tgi.backends.triton_common.kernels.kv_quant import quantize_into_cache

            fixed = self.spec.kv_scales[layer_idx] if self.spec.kv_scales else (None, None)
            key_scales, value_scales = self.scales(layer_idx)
            quantize_into_cache(key, key_cache, key_scales, slot_mapping, self.spec.kv_dtype, fixed[0])
            quantize_into_cache(value, value_cache, value_scales, slot_mapping, self.spec.kv_dtype, fixed[1])
            return
        from tgi.backends.triton_common.kernels import reshape_and_cache

        reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)

    def layer(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(key_cache, value_cache), each [num_blocks, block_size, num_kv_heads, head_dim] (a quantized
        cache's codes, uint8)."""
        return self.storage[layer_idx, 0], self.storage[layer_idx, 1]

    def scales(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """A quantized cache's (key scales, value scales), each [num_blocks, block_size, num_kv_heads] float32;
        None for a cache in the model's dtype."""
        if self.scale_storage is None:
            return None
        return self.scale_storage[layer_idx, 0], self.scale_storage[layer_idx, 1]

    def nbytes(self) -> int:
        scales = 0 if self.scale_storage is None else self.scale_storage.numel() * 4
        return self.storage.numel() * self.storage.element_size() + scales
