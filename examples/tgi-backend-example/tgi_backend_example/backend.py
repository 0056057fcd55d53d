"""The example backend: tgi's torch models, with naive paged attention written for clarity."""

from __future__ import annotations

import torch

from tgi.core.interfaces import AttentionCaps, DeviceInfo, KVCacheSpec, MemoryInfo
from tgi.core.torch import AttentionBackend, KVCache, TorchBackend

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class ExampleKVCache(KVCache):
    """Per layer, keys and values as [num_slots, kv_heads, head_dim] with slot = block * block_size + offset."""

    def __init__(self, spec: KVCacheSpec, num_blocks: int) -> None:
        super().__init__(spec, num_blocks)
        shape = (num_blocks * spec.block_size, spec.num_kv_heads, spec.head_dim)
        dtype = _DTYPES[spec.dtype]
        self._layers = [
            (torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in range(spec.num_layers)
        ]

    def write(self, layer_idx, key, value, slot_mapping):
        keep = slot_mapping >= 0
        k_cache, v_cache = self._layers[layer_idx]
        k_cache[slot_mapping[keep]] = key[keep].to(k_cache.dtype)
        v_cache[slot_mapping[keep]] = value[keep].to(v_cache.dtype)

    def layer(self, layer_idx):
        return self._layers[layer_idx]


def _context(kv_cache, layer_idx, block_table, length):
    """Keys and values of the first `length` positions of one sequence: [length, kv_heads, head_dim]."""
    k_cache, v_cache = kv_cache.layer(layer_idx)
    bs = kv_cache.spec.block_size
    pos = torch.arange(length)
    slots = block_table[pos // bs].long() * bs + pos % bs
    return k_cache[slots], v_cache[slots]


def _attend(q, k, v, q_pos, layer):
    """q [Tq, H, D] at positions q_pos, over k/v [Tk, Hkv, D] at positions 0..Tk-1, causal."""
    group = layer.num_heads // layer.num_kv_heads
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * layer.scale
    if layer.softcap is not None:
        scores = layer.softcap * torch.tanh(scores / layer.softcap)
    k_pos = torch.arange(k.shape[0])
    visible = k_pos[None, :] <= q_pos[:, None]
    if layer.sliding_window is not None:
        visible &= k_pos[None, :] > q_pos[:, None] - layer.sliding_window
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).to(q.dtype)


class ExampleAttention(AttentionBackend):
    name = "example-naive"

    def caps(self) -> AttentionCaps:
        return AttentionCaps(
            head_sizes=None, dtypes=tuple(_DTYPES), block_sizes=(8, 16, 32), sliding_window=True, softcap=True
        )

    def prefill(self, q, k, v, kv_cache, layer_idx, meta, layer):
        out = torch.empty_like(q)
        starts = meta.query_start_loc.tolist()
        for i, seq_len in enumerate(meta.prefill_seq_lens_host):
            a, b = starts[i], starts[i + 1]
            keys, values = _context(kv_cache, layer_idx, meta.prefill_block_tables[i], seq_len)
            out[a:b] = _attend(q[a:b], keys, values, torch.arange(seq_len - (b - a), seq_len), layer)
        return out

    def decode(self, q, kv_cache, layer_idx, meta, layer):
        out = torch.empty_like(q)
        for i, seq_len in enumerate(meta.decode_seq_lens_host):
            keys, values = _context(kv_cache, layer_idx, meta.decode_block_tables[i], seq_len)
            out[i : i + 1] = _attend(q[i : i + 1], keys, values, torch.tensor([seq_len - 1]), layer)
        return out


class ExampleBackend(TorchBackend):
    name = "example"
    attention_name = "example-naive"

    def devices(self):
        return [DeviceInfo(0, "host CPU (example backend)", 0)]

    def memory_info(self):
        with open("/proc/meminfo") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        return MemoryInfo(total=info["MemTotal"], free=info["MemAvailable"])

    def supported_dtypes(self):
        return tuple(_DTYPES)

    def default_dtype(self):
        return "float32"

    def torch_device(self):
        return torch.device("cpu")

    def create_attention(self, name):
        return ExampleAttention()

    def create_kv_cache(self, spec, num_blocks) -> KVCache:
        return ExampleKVCache(spec, num_blocks)
