"""The CPU backend's quantized paged KV cache (`--kv-cache-dtype int8 | fp8_e4m3fn | fp8_e5m2`): one byte a
value, a float32 scale per token and kv head beside it (`tgi.backends.cpu.kv_quant` says how they are made)."""

from __future__ import annotations

import torch

from tgi.backends.cpu.kv_cache import lazily_zeroed, written_rows
from tgi.backends.cpu.kv_quant import CODE_DTYPES, KINDS, QuantizedPart, quantize
from tgi.core.interfaces import KVCacheSpec
from tgi.core.torch.kv_cache import KVCache


class QuantizedCpuKVCache(KVCache):
    """Per layer, keys and values as `QuantizedPart`s: codes [num_blocks, block_size, Hkv, Dh] and scales
    [num_blocks, block_size, Hkv] float32 (slot `s` is `[s // block_size, s % block_size]`, as in
    `CpuKVCache`). Tokens are quantized as they are written; the attention reads the codes and scales
    (`layer`). Zeroed lazily by the OS as `CpuKVCache` is: a slot never written reads as 0 with scale 0.
    """

    def __init__(self, spec: KVCacheSpec, num_blocks: int, device: torch.device | str = "cpu") -> None:
        super().__init__(spec, num_blocks)
        if spec.kv_dtype not in CODE_DTYPES:
            raise ValueError(f"a quantized KV cache stores {', '.join(CODE_DTYPES)}, not {spec.kv_dtype}")
        if spec.kv_scales and len(spec.kv_scales) != spec.num_layers:
            raise ValueError(f"{len(spec.kv_scales)} pairs of KV scales for {spec.num_layers} layers")
        self.device = torch.device(device)
        self.kv_dtype = spec.kv_dtype
        self.kind = KINDS[spec.kv_dtype]
        codes = (num_blocks, spec.block_size, spec.num_kv_heads, spec.head_dim)
        self.keys: list[QuantizedPart] = []
        self.values: list[QuantizedPart] = []
        for _ in range(spec.num_layers):
            for parts in (self.keys, self.values):
                parts.append(
                    QuantizedPart(
                        lazily_zeroed(codes, CODE_DTYPES[spec.kv_dtype], self.device),
                        lazily_zeroed(codes[:3], torch.float32, self.device),
                        spec.kv_dtype,
                    )
                )

    #: the native writer (`tgi.backends.cpu.native.kv_quant.kv_write_quantized`), set by the backend where
    #: the native kernels build; else the torch reference (`kv_quant.quantize`), the same bytes
    native_write = None

    def fixed_scales(self, layer_idx: int) -> tuple[float, float] | tuple[None, None]:
        """The checkpoint's (k_scale, v_scale) of the layer, or (None, None): computed per token."""
        return self.spec.kv_scales[layer_idx] if self.spec.kv_scales else (None, None)

    def write(
        self, layer_idx: int, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        if slot_mapping.numel() == 0:
            return
        k_part, v_part = self.keys[layer_idx], self.values[layer_idx]
        k_fixed, v_fixed = self.fixed_scales(layer_idx)
        if self.native_write is not None:
            self.native_write(k_part, v_part, key, value, slot_mapping, k_fixed, v_fixed)
            return
        slots, key, value = written_rows(slot_mapping, key, value)
        h, d = self.spec.num_kv_heads, self.spec.head_dim
        for part, x, fixed in ((k_part, key, k_fixed), (v_part, value, v_fixed)):
            codes, scales = quantize(x, self.kv_dtype, fixed)
            # (as bytes: torch has no float8 index_copy on the CPU)
            part.codes.view(torch.uint8).view(-1, h, d).index_copy_(0, slots, codes.view(torch.uint8))
            part.scales.view(-1, h).index_copy_(0, slots, scales)

    def layer(self, layer_idx: int) -> tuple[QuantizedPart, QuantizedPart]:
        """(keys, values) of one layer, each a `QuantizedPart`."""
        return self.keys[layer_idx], self.values[layer_idx]

    def nbytes(self) -> int:
        parts = (*self.keys, *self.values)
        return sum(t.numel() * t.element_size() for p in parts for t in (p.codes, p.scales))
