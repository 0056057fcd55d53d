"""The KV write: new keys/values of T tokens into the paged cache at a slot mapping.

Cache layout (per layer, keys and values alike): [num_blocks, block_size, num_kv_heads, head_dim] with the
last dimension contiguous, the layout flash-attn's and FlashInfer's paged ("NHD") kernels read too. Slot `s`
is `[s // block_size, s % block_size]`; a negative slot (a padding token) stores nothing.

One program copies BLOCK_T tokens, each as one flat row of num_kv_heads * head_dim elements.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from tgi.backends.triton_common.kernels.common import interpreting


# the token count changes from step to step: not a specialisation (a new variant) of its own
@triton.jit(do_not_specialize=["num_tokens"])
def _reshape_and_cache_kernel(
    Key,  # [T, Hkv, D]
    Value,  # [T, Hkv, D]
    K_cache,  # [num_blocks, PAGE, Hkv, D]
    V_cache,
    Slots,  # [T] int64
    num_tokens,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_kcb,
    stride_kcs,
    stride_kch,
    stride_vcb,
    stride_vcs,
    stride_vch,
    PAGE: tl.constexpr,
    NUM_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_HD: tl.constexpr,  # next power of two >= NUM_HEADS * HEAD_DIM
):
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_mask = offs_t < num_tokens
    slot = tl.load(Slots + offs_t, mask=t_mask, other=-1).to(tl.int64)
    keep = t_mask & (slot >= 0)  # a negative slot stores nothing
    slot = tl.maximum(slot, 0)  # keeps the (unused) addresses of skipped rows in range
    blk = slot // PAGE
    off = slot % PAGE
    offs_hd = tl.arange(0, BLOCK_HD)
    h = offs_hd // HEAD_DIM
    d = offs_hd % HEAD_DIM
    mask = keep[:, None] & (offs_hd[None, :] < NUM_HEADS * HEAD_DIM)
    src_t = offs_t[:, None].to(tl.int64)
    k = tl.load(Key + src_t * stride_kt + (h * stride_kh + d)[None, :], mask=mask, other=0.0)
    v = tl.load(Value + src_t * stride_vt + (h * stride_vh + d)[None, :], mask=mask, other=0.0)
    k_dst = K_cache + (blk * stride_kcb + off * stride_kcs)[:, None] + (h * stride_kch + d)[None, :]
    v_dst = V_cache + (blk * stride_vcb + off * stride_vcs)[:, None] + (h * stride_vch + d)[None, :]
    tl.store(k_dst, k.to(K_cache.dtype.element_ty), mask=mask)
    tl.store(v_dst, v.to(V_cache.dtype.element_ty), mask=mask)


def reshape_and_cache(
    key: torch.Tensor,  # [T, Hkv, D]
    value: torch.Tensor,  # [T, Hkv, D]
    key_cache: torch.Tensor,  # [num_blocks, block_size, Hkv, D]
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,  # [T'] int64, T' <= T (extra key rows are ignored)
) -> None:
    """Store `key[i]`/`value[i]` at `slot_mapping[i]` for every i; negative slots are skipped."""
    n = slot_mapping.shape[0]
    if n == 0:
        return
    _, page, hkv, d = key_cache.shape
    if key.stride(-1) != 1 or value.stride(-1) != 1:
        key, value = key.contiguous(), value.contiguous()
    block_hd = triton.next_power_of_2(hkv * d)
    # a few KB per program on a GPU; the interpreter pays per program, so give it whole steps
    block_t = 64 if interpreting() else max(1, 2048 // block_hd)
    _reshape_and_cache_kernel[(triton.cdiv(n, block_t),)](
        key, value, key_cache, value_cache, slot_mapping, n,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        PAGE=page, NUM_HEADS=hkv, HEAD_DIM=d, BLOCK_T=block_t, BLOCK_HD=block_hd,
    )  # fmt: skip
