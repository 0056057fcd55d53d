"""Reference paged attention for the CPU backend, on torch's scaled_dot_product_attention.

Prefill runs one SDPA per chunk over the chunk's cached context (gathered from its block table, only the
blocks it needs) followed by its own new keys/values. Decode is vectorised over the batch: the blocks each
sequence uses (or, with a sliding window, only those its window covers) are gathered into a padded
[D, L, Hkv, Dh] tensor and attended with one masked SDPA. Gather plans and masks depend only on the step's
metadata, so they are computed once per step and shared by all layers (memoised in `meta.extra`).

`CpuNativeAttention` ("cpu-native") keeps that prefill but decodes with a C++ kernel
(`tgi.backends.cpu.native`, compiled at first use) that reads keys/values straight through the block table:
no gather copy, no mask. It supports everything the reference does (any head size, float32/bfloat16, GQA,
sliding window, soft-cap), so it never hands a layer back to the SDPA path. In batch-invariant mode
(`--deterministic`) it runs prefill on that kernel too, each query of a chunk as one decode row: SDPA blocks
its sums by the chunk's length and by whether the context came from the cache, the decode kernel sums each
query's own keys in one order whatever the step. With `TGI_CPU_PREFILL_IMPL=native` its prefill runs on a C++
kernel too (`native.paged_prefill`: bfloat16 on AVX512-BF16, 3-4x SDPA), which refuses by name what it cannot run.
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch
import torch.nn.functional as F

from tgi.backends.cpu.kv_quant import QuantizedPart, dequantize_blocks
from tgi.backends.cpu.native import kv_quant as native_kv
from tgi.core.interfaces import UnsupportedError
from tgi.core.interfaces.types import AttentionCaps
from tgi.core.torch.attention import AttentionBackend, AttentionLayerSpec, AttentionMetadata
from tgi.core.torch.kv_cache import KVCache

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _attend(
    q: torch.Tensor,  # [B, H, Lq, Dh]
    k: torch.Tensor,  # [B, Hkv, S, Dh]
    v: torch.Tensor,  # [B, Hkv, S, Dh]
    mask: torch.Tensor | None,  # bool, broadcastable to [B, 1, Lq, S]; True = attend
    is_causal: bool,
    layer: AttentionLayerSpec,
) -> torch.Tensor:  # [B, H, Lq, Dh]
    if k.dtype != q.dtype:
        k, v = k.to(q.dtype), v.to(q.dtype)
    gqa = q.shape[1] != k.shape[1]
    if layer.softcap is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, scale=layer.scale, enable_gqa=gqa
        )
    # soft-capped logits: SDPA has no hook for them, do it by hand in float32
    b, h, lq, dh = q.shape
    hkv, s = k.shape[1], k.shape[2]
    g = h // hkv
    qf = q.float().reshape(b, hkv, g * lq, dh)
    scores = torch.matmul(qf, k.float().transpose(-1, -2)) * layer.scale  # [B, Hkv, G*Lq, S]
    scores = torch.tanh(scores / layer.softcap) * layer.softcap
    scores = scores.view(b, hkv, g, lq, s)
    if is_causal:
        mask = torch.ones(lq, s, dtype=torch.bool, device=q.device).tril(s - lq)[None, None]
    if mask is not None:
        scores = scores.masked_fill(~mask.view(mask.shape[0], 1, 1, mask.shape[-2], s), float("-inf"))
    probs = torch.softmax(scores, dim=-1).view(b, hkv, g * lq, s)
    out = torch.matmul(probs, v.float())  # [B, Hkv, G*Lq, Dh]
    return out.view(b, h, lq, dh).to(q.dtype)


class CpuAttention(AttentionBackend):
    """The reference implementation: any head size, float32/bfloat16, sliding window, soft-cap, GQA."""

    name = "cpu-sdpa"

    def __init__(self) -> None:
        # gather buffers reused across layers and steps (at most one layer's share of the cache each)
        self._workspace: dict[str, torch.Tensor] = {}

    def caps(self) -> AttentionCaps:
        return AttentionCaps(
            head_sizes=None,
            dtypes=("float32", "bfloat16"),
            block_sizes=BLOCK_SIZES,
            sliding_window=True,
            softcap=True,
            chunked_prefill=True,
            bidirectional_spans=True,
        )

    # ------------------------------------------------------------------ prefill
    def prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: KVCache,
        layer_idx: int,
        meta: AttentionMetadata,
        layer: AttentionLayerSpec,
    ) -> torch.Tensor:
        key_cache, value_cache = kv_cache.layer(layer_idx)
        block_size = key_cache.shape[1]
        window = layer.sliding_window
        out = torch.empty_like(q)
        # a quantized cache is read even for the chunk's own keys: every query sees the values decode sees
        from_cache = isinstance(key_cache, QuantizedPart)
        for s, e, blocks, keys, mask in self._prefill_plan(meta, block_size, window, from_cache):
            qi = q[s:e].transpose(0, 1).unsqueeze(0)  # [1, H, L, Dh]
            if blocks is None:  # no cached context: the chunk's own keys/values
                ki, vi = k[s:e], v[s:e]
            else:  # cached context and the chunk itself (already written), straight from the cache
                ki = self._gather("k", key_cache, blocks, q.dtype)[keys]
                vi = self._gather("v", value_cache, blocks, q.dtype)[keys]
            ki = ki.transpose(0, 1).unsqueeze(0)  # [1, Hkv, S, Dh]
            vi = vi.transpose(0, 1).unsqueeze(0)
            o = _attend(qi, ki, vi, mask, mask is None, layer)
            out[s:e] = o[0].transpose(0, 1)
        return out

    def _gather(
        self,
        name: str,
        cache: torch.Tensor | QuantizedPart,
        blocks: torch.Tensor,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """cache[blocks] as [len(blocks) * block_size, Hkv, Dh], into a reused buffer (allocating fresh
        tens-of-MB tensors every layer costs more than the copy itself); a quantized cache's dequantized
        to `dtype` (the queries'), a dense cache's as stored."""
        if isinstance(cache, QuantizedPart):
            return dequantize_blocks(cache, self._gather(name, cache.codes, blocks, dtype), blocks, dtype)
        _, bs, hkv, dh = cache.shape
        n = blocks.numel()
        numel = n * bs * hkv * dh
        buf = self._workspace.get(name)
        # (a buffer made under inference mode cannot be written outside it, and the reverse: make another)
        if (
            buf is None
            or buf.numel() < numel
            or buf.dtype != cache.dtype
            or buf.device != cache.device
            or buf.is_inference() != torch.is_inference_mode_enabled()
        ):
            buf = torch.empty(numel, dtype=cache.dtype, device=cache.device)
            self._workspace[name] = buf
        dst = buf[:numel].view(n, bs, hkv, dh)
        torch.index_select(cache, 0, blocks.reshape(-1), out=dst)
        return dst.view(n * bs, hkv, dh)

    def _prefill_plan(
        self, meta: AttentionMetadata, block_size: int, window: int | None, from_cache: bool = False
    ) -> list[tuple[int, int, torch.Tensor | None, slice, torch.Tensor | None]]:
        """Per chunk: (token start, token end, blocks holding the keys it attends to (None when it has no
        cached context and not `from_cache`: it then uses its own k/v), the keys' slots within those blocks,
        bool mask [1, 1, L, S] or None for a plain causal chunk). A chunk's bidirectional spans
        (`meta.prefill_bidirectional_spans`) let their tokens see each other both ways, within the window:
        transformers' Gemma 3 mask, AND(window, OR(causal, same span))."""
        key = f"cpu-sdpa/prefill/{block_size}/{window}/{from_cache}"
        plan = meta.extra.get(key)
        if plan is not None:
            return plan
        qsl = meta.query_start_loc.tolist()
        device = meta.query_start_loc.device
        plan = []
        all_spans = meta.prefill_bidirectional_spans
        for i, start in enumerate(meta.prefill_start_pos):
            s, e = qsl[i], qsl[i + 1]
            spans = all_spans[i] if all_spans else ()
            n = e - s
            kstart = 0 if window is None else max(0, start - window + 1)  # oldest key any query may see
            if start > kstart or from_cache:
                first_blk = kstart // block_size
                last_blk = (start + n + block_size - 1) // block_size
                blocks = meta.prefill_block_tables[i, first_blk:last_blk].to(torch.int64)
                skip = kstart - first_blk * block_size
                ctx = slice(skip, skip + start + n - kstart)
            else:
                kstart = start
                blocks, ctx = None, slice(0, 0)
            if kstart == start and (window is None or n <= window) and not spans:  # plainly causal
                plan.append((s, e, blocks, ctx, None))
                continue
            qpos = torch.arange(start, start + n, device=device)[:, None]
            kpos = torch.arange(kstart, start + n, device=device)[None, :]
            mask = kpos <= qpos
            for lo, hi in spans:
                mask |= (qpos >= lo) & (qpos < hi) & (kpos >= lo) & (kpos < hi)
            if window is not None:
                mask &= kpos > qpos - window
            plan.append((s, e, blocks, ctx, mask[None, None]))
        meta.extra[key] = plan
        return plan

    # ------------------------------------------------------------------ decode
    def decode(
        self,
        q: torch.Tensor,
        kv_cache: KVCache,
        layer_idx: int,
        meta: AttentionMetadata,
        layer: AttentionLayerSpec,
    ) -> torch.Tensor:
        key_cache, value_cache = kv_cache.layer(layer_idx)
        block_size, hkv, dh = key_cache.shape[1], key_cache.shape[2], key_cache.shape[3]
        n, h = q.shape[0], q.shape[1]
        blocks, mask = self._decode_plan(meta, block_size, layer.sliding_window)
        dtype = q.dtype  # a quantized cache's blocks are dequantized to it
        k = self._gather("k", key_cache, blocks, dtype).view(n, -1, hkv, dh)  # [D, L, Hkv, Dh]
        v = self._gather("v", value_cache, blocks, dtype).view(n, -1, hkv, dh)
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # [D, Hkv, L, Dh]
        # the G query heads sharing a kv head act as G query rows of that head: [D, Hkv, G, Dh], so no
        # key/value expansion is needed and the mask [D, 1, 1, L] broadcasts over them
        out = _attend(q.view(n, hkv, h // hkv, dh), k, v, mask, False, layer)
        return out.view(n, h, dh)

    def _decode_plan(
        self, meta: AttentionMetadata, block_size: int, window: int | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(block ids [D, nb] to gather, bool mask [D, 1, 1, nb * block_size])."""
        key = f"cpu-sdpa/decode/{block_size}/{window}"
        plan = meta.extra.get(key)
        if plan is not None:
            return plan
        seq_lens = meta.decode_seq_lens.to(torch.int64)
        tables = meta.decode_block_tables.to(torch.int64)
        device = tables.device
        d, max_table = tables.shape
        nb = (meta.max_decode_seq_len + block_size - 1) // block_size
        if window is not None and meta.max_decode_seq_len > window:
            # only the blocks the window covers: keys [seq_len - window, seq_len)
            nb = min(nb, (window + block_size - 2) // block_size + 1)
            first = (seq_lens - window).clamp(min=0) // block_size
        else:
            first = torch.zeros(d, dtype=torch.int64, device=device)
        idx = first[:, None] + torch.arange(nb, device=device)[None, :]  # [D, nb] logical block index
        valid = idx < max_table
        blocks = tables.gather(1, idx.clamp(max=max(max_table - 1, 0)))
        pos = (idx[:, :, None] * block_size + torch.arange(block_size, device=device)).view(d, -1)
        mask = (pos < seq_lens[:, None]) & valid.repeat_interleave(block_size, dim=1)
        if window is not None:
            mask &= pos >= (seq_lens - window)[:, None]
        plan = (blocks, mask[:, None, None, :])
        meta.extra[key] = plan
        return plan


class CpuNativeAttention(CpuAttention):
    """The reference's prefill, and decode on the native C++ paged kernel (`tgi.backends.cpu.native`).

    Same capabilities as `CpuAttention`: the kernel handles GQA, any head size, float32/bfloat16, the sliding
    window and the soft-cap itself. Constructing it builds (or loads the cached build of) the kernel and
    raises `NativeBuildError` with the compiler's reason when that fails.
    """

    name = "cpu-native"

    def __init__(self, batch_invariant: bool = False) -> None:
        super().__init__()
        #: prefill on the decode kernel, one query at a time (`--deterministic`)
        self.batch_invariant = batch_invariant
        from tgi.backends.cpu import native

        native.load()  # raises NativeBuildError with the reason
        self._native = native
        #: `native.paged_decode`'s implementation ("auto", "vector", "amx"); `TGI_CPU_DECODE_IMPL` overrides
        self.decode_impl = os.environ.get("TGI_CPU_DECODE_IMPL", "auto")
        #: a quantized cache's (`native.kv_quant.paged_decode_quantized`); `TGI_CPU_KV_DECODE_IMPL` overrides
        self.quant_decode_impl = os.environ.get("TGI_CPU_KV_DECODE_IMPL", "auto")
        #: prefill: "sdpa" (torch's, the default) or "native" (`native.paged_prefill`, `TGI_CPU_PREFILL_IMPL=
        #: native`). Not the default yet: its bfloat16 numbers differ from SDPA's by rounding, which flips
        #: near-ties of the default model that e2e tests hold a server with a warm prefix cache to
        #: (docs/backends/cpu.md, "Prefill attention")
        self.prefill_impl = os.environ.get("TGI_CPU_PREFILL_IMPL", "sdpa")
        if self.prefill_impl not in ("sdpa", "native"):
            raise ValueError(f"TGI_CPU_PREFILL_IMPL must be 'sdpa' or 'native', not {self.prefill_impl!r}")
        if self.prefill_impl == "native" and not native.load().paged_prefill_available():
            raise UnsupportedError(
                "TGI_CPU_PREFILL_IMPL=native: the native prefill attention needs a CPU with AVX512-BF16"
            )

    def caps(self) -> AttentionCaps:
        # batch-invariant prefill runs each query as a causal decode row, the native prefill is causal too:
        # no bidirectional spans
        causal_only = self.batch_invariant or self.prefill_impl == "native"
        return replace(super().caps(), bidirectional_spans=not causal_only)

    def decode(
        self,
        q: torch.Tensor,
        kv_cache: KVCache,
        layer_idx: int,
        meta: AttentionMetadata,
        layer: AttentionLayerSpec,
    ) -> torch.Tensor:
        return self._paged_decode(
            q, kv_cache, layer_idx, meta.decode_block_tables, meta.decode_seq_lens, layer
        )

    def _paged_decode(
        self,
        q: torch.Tensor,
        kv_cache: KVCache,
        layer_idx: int,
        block_tables: torch.Tensor,
        seq_lens: torch.Tensor,
        layer: AttentionLayerSpec,
    ) -> torch.Tensor:
        """The native decode kernel for the rows of `q` [T, H, Dh] over `block_tables`/`seq_lens`, in q's dtype."""
        key_cache, value_cache = kv_cache.layer(layer_idx)
        if isinstance(key_cache, QuantizedPart):  # the codes and scales read as stored
            return native_kv.paged_decode_quantized(
                q, key_cache, value_cache, block_tables, seq_lens, layer.scale, layer.sliding_window,
                layer.softcap, impl=self.quant_decode_impl,
            )  # fmt: skip
        out = self._native.paged_decode(
            q.to(key_cache.dtype),
            key_cache,
            value_cache,
            block_tables,
            seq_lens,
            layer.scale,
            layer.sliding_window,
            layer.softcap,
            impl=self.decode_impl,
        )
        return out.to(q.dtype)

    def prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        kv_cache: KVCache,
        layer_idx: int,
        meta: AttentionMetadata,
        layer: AttentionLayerSpec,
    ) -> torch.Tensor:
        if not self.batch_invariant:
            if self.prefill_impl == "native":
                key_cache, value_cache = kv_cache.layer(layer_idx)
                self._check_native_prefill(q, key_cache, meta)
                quantized = isinstance(key_cache, QuantizedPart)
                run = native_kv.paged_prefill_quantized if quantized else self._native.paged_prefill
                return run(
                    q, key_cache, value_cache, meta.prefill_block_tables, meta.query_start_loc,
                    meta.prefill_seq_lens, layer.scale, layer.sliding_window, layer.softcap,
                )  # fmt: skip
            return super().prefill(q, k, v, kv_cache, layer_idx, meta, layer)
        if any(meta.prefill_bidirectional_spans):
            raise UnsupportedError(
                f"attention '{self.name}' in batch-invariant mode runs prefill causally: it cannot let an "
                "image's tokens attend to each other both ways (Gemma 3)"
            )
        # the chunk's keys/values are in the cache already (the model writes them before attention)
        tables, lens = self._queries_as_decodes(meta)
        return self._paged_decode(q, kv_cache, layer_idx, tables, lens, layer)

    def _check_native_prefill(
        self, q: torch.Tensor, key_cache: torch.Tensor, meta: AttentionMetadata
    ) -> None:
        """Refuse, by name, a step the native prefill cannot run (it was asked for: no fallback to SDPA)."""
        stored = q.dtype if isinstance(key_cache, QuantizedPart) else key_cache.dtype  # read as bfloat16
        if stored != q.dtype or not self._native.prefill_supported(q.dtype, q.shape[-1]):
            raise UnsupportedError(
                f"TGI_CPU_PREFILL_IMPL=native takes bfloat16 queries and caches and head sizes that are a "
                f"multiple of 32 up to 256, not {q.dtype} / {key_cache.dtype} with head size {q.shape[-1]}"
            )
        if any(meta.prefill_bidirectional_spans):
            raise UnsupportedError(
                "TGI_CPU_PREFILL_IMPL=native runs prefill causally: it cannot let an image's tokens attend to "
                "each other both ways (Gemma 3)"
            )

    def _queries_as_decodes(self, meta: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        """Every prefill query as a decode row: (block tables [Tp, max_blocks] int32, its sequence's row
        repeated, and context lengths [Tp] int32: its position + 1). Once per step, shared by the layers."""
        key = "cpu-native/prefill-as-decode"
        plan = meta.extra.get(key)
        if plan is not None:
            return plan
        qsl = meta.query_start_loc.tolist()
        counts = torch.tensor([qsl[i + 1] - qsl[i] for i in range(len(qsl) - 1)], dtype=torch.int64)
        tables = meta.prefill_block_tables.repeat_interleave(counts.to(meta.prefill_block_tables.device), 0)
        lens = torch.cat(
            [torch.empty(0, dtype=torch.int32)]
            + [
                torch.arange(start + 1, start + 1 + int(n), dtype=torch.int32)
                for start, n in zip(meta.prefill_start_pos, counts.tolist(), strict=True)
            ]
        ).to(tables.device)
        plan = (tables.contiguous(), lens)
        meta.extra[key] = plan
        return plan
