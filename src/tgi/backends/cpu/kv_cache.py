"""Paged KV cache in host memory for the CPU backend."""

from __future__ import annotations

import math
import mmap

import torch

from tgi.core.dtypes import to_torch_dtype
from tgi.core.interfaces import KVCacheSpec
from tgi.core.torch.kv_cache import KVCache


def lazily_zeroed(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zero tensor whose pages the OS zeroes on first touch: its own anonymous memory map (zero by
    definition, page-aligned), asked for transparent huge pages where the kernel offers them, released when
    the tensor is. Not `calloc` (numpy's `zeros`): glibc serves a large `calloc` from an earlier free when
    its own `mmap` fails (a process near `vm.max_map_count`) and then writes zeros over all of it, resident
    at once. All-zero bytes are 0.0 in every float dtype. Elsewhere than host memory: `torch.zeros`."""
    if device.type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        return torch.zeros(shape, dtype=dtype)
    # private (a forked child gets a copy on write, not this cache); an OSError names a refusal: no fallback
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):  # the TLB's reach over a large cache (numpy asked the same)
        region.madvise(mmap.MADV_HUGEPAGE)
    return torch.frombuffer(region, dtype=torch.uint8).view(dtype).view(shape)  # holds `region`


class CpuKVCache(KVCache):
    """Per layer one key and one value tensor of shape [num_blocks, block_size, num_kv_heads, head_dim].

    Slot `s` is `[s // block_size, s % block_size]`, so a write is one `index_copy_` into the flat
    [num_blocks * block_size, num_kv_heads, head_dim] view. The storage is zero-initialised: attention may
    read (and mask out) slots that were never written, and these must hold finite values. It is zeroed by
    the OS, page by page as slots are first written (`lazily_zeroed`), not by a pass over it at start-up:
    the default cache is a quarter of host memory (~5 GB on 24 GiB, ~3.5 s to zero on 2 cores).
    """

    def __init__(self, spec: KVCacheSpec, num_blocks: int, device: torch.device | str = "cpu") -> None:
        super().__init__(spec, num_blocks)
        self.dtype = to_torch_dtype(spec.dtype)
        self.device = torch.device(device)
        shape = (num_blocks, spec.block_size, spec.num_kv_heads, spec.head_dim)
        self.key_caches: list[torch.Tensor] = []
        self.value_caches: list[torch.Tensor] = []
        for _ in range(spec.num_layers):
            self.key_caches.append(lazily_zeroed(shape, self.dtype, self.device))
            self.value_caches.append(lazily_zeroed(shape, self.dtype, self.device))

    #: the native writer (`tgi.backends.cpu.native.fused().kv_write`), set by the backend where it builds
    native_write = None

    def write(
        self, layer_idx: int, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        if slot_mapping.numel() == 0:
            return
        if self.native_write is not None and key.dtype == self.dtype and value.dtype == self.dtype:
            kc, vc = self.key_caches[layer_idx], self.value_caches[layer_idx]
            self.native_write(kc, vc, key, value, slot_mapping)  # one call: no per-layer mask/cast ops
            return
        slot_mapping, key, value = written_rows(slot_mapping, key, value)
        h, d = self.spec.num_kv_heads, self.spec.head_dim
        self.key_caches[layer_idx].view(-1, h, d).index_copy_(0, slot_mapping, key.to(self.dtype))
        self.value_caches[layer_idx].view(-1, h, d).index_copy_(0, slot_mapping, value.to(self.dtype))

    def layer(self, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(key_cache, value_cache), each [num_blocks, block_size, num_kv_heads, head_dim]."""
        return self.key_caches[layer_idx], self.value_caches[layer_idx]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.key_caches, *self.value_caches))


def create_cpu_kv_cache(spec: KVCacheSpec, num_blocks: int, native_writes: bool) -> KVCache:
    """The cache `spec` asks for: `CpuKVCache` in the model's dtype, or `QuantizedCpuKVCache` for a quantized
    `spec.kv_dtype`; written by the native kernels where `native_writes` (else by torch's ops)."""
    from tgi.backends.cpu import native

    if spec.quantized:
        from tgi.backends.cpu.quantized_kv_cache import QuantizedCpuKVCache

        cache = QuantizedCpuKVCache(spec, num_blocks)
        if native_writes:
            from tgi.backends.cpu.native.kv_quant import kv_write_quantized

            cache.native_write = kv_write_quantized
        return cache
    cache = CpuKVCache(spec, num_blocks)
    if native_writes:
        cache.native_write = native.fused().kv_write
    return cache


def written_rows(
    slot_mapping: torch.Tensor, key: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The rows a cache write stores: the first `len(slot_mapping)` of `key` and `value`, less the padded ones
    (slot < 0), with their slots as int64 indices."""
    n = slot_mapping.shape[0]
    key, value = key[:n], value[:n]
    if bool((slot_mapping < 0).any()):
        keep = slot_mapping >= 0
        slot_mapping, key, value = slot_mapping[keep], key[keep], value[keep]
    return slot_mapping.to(torch.int64), key, value
