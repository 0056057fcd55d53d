"""The CPU backend's KV cache: zero, aligned, and zeroed by the OS page by page instead of at start-up."""

from __future__ import annotations

import ctypes
import os

import pytest
import torch

from tgi.backends.cpu.kv_cache import CpuKVCache, lazily_zeroed
from tgi.core.interfaces import KVCacheSpec


def _resident_bytes(tensors) -> int:
    """The resident bytes of the pages that hold `tensors`' own storage, by `mincore(2)` over exactly their
    address ranges: what they occupy, whatever else the process (a test worker with threads and tensors of
    earlier tests) holds. (The Rss of their mappings in /proc/self/smaps was not that: the kernel merges an
    anonymous mapping with a resident neighbour, and one test counted 947 MiB of it.)"""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for t in tensors:
        start = t.untyped_storage().data_ptr()
        lo, hi = start - start % page, start + t.untyped_storage().nbytes()
        pages = -(-(hi - lo) // page)
        vec = (ctypes.c_ubyte * pages)()
        if libc.mincore(lo, hi - lo, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        total += sum(b & 1 for b in vec) * page
    return total


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_lazily_zeroed_is_zero_aligned_and_writable(dtype):
    t = lazily_zeroed((3, 16, 2, 64), dtype, torch.device("cpu"))
    assert t.shape == (3, 16, 2, 64) and t.dtype == dtype and t.is_contiguous()
    assert t.data_ptr() % 64 == 0
    assert not t.any()
    t[1, 2] = 1.5
    assert t.sum().item() == 1.5 * 2 * 64


def test_a_large_cache_takes_no_memory_until_written():
    spec = KVCacheSpec(num_layers=4, num_kv_heads=4, head_dim=64, block_size=16, dtype="bfloat16")
    cache = CpuKVCache(spec, num_blocks=16384)  # 4 layers x 2 x 128 MiB
    assert cache.nbytes() == 1 << 30
    held = _resident_bytes([*cache.key_caches, *cache.value_caches])
    assert held < 64 << 20, f"creating a 1 GiB cache took {held >> 20} MiB"
    key, _ = cache.layer(0)
    assert not key[:8].any() and not key[-8:].any()
    k = torch.ones(4, 4, 64, dtype=torch.bfloat16)
    cache.write(0, k, k, torch.tensor([0, 1, 16 * 16383, 16 * 16383 + 15]))
    assert key[0, :2].eq(1).all() and key[-1, 15].eq(1).all() and not key[0, 2:].any()
