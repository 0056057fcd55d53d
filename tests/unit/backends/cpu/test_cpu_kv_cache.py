"""The CPU backend's KV cache: zero, aligned, and zeroed by the OS page by page instead of at start-up."""

from __future__ import annotations

import pytest
import torch

from tgi.backends.cpu.kv_cache import CpuKVCache, lazily_zeroed
from tgi.core.interfaces import KVCacheSpec


def _resident_bytes(tensors) -> int:
    """The resident bytes of the mappings that hold `tensors` (from /proc/self/smaps): what the tensors
    themselves occupy, whatever else this process (a test worker with threads of earlier tests) allocates."""
    starts = {t.untyped_storage().data_ptr() for t in tensors}
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):  # a mapping's first line: start-end perms ...
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = any(lo <= p < hi for p in starts)
            elif inside and head == "Rss:":
                total += int(line.split()[1]) * 1024
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
