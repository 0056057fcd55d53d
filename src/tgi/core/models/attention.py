"""The self-attention every native model shares: fused q/k/v projection, optional per-head q/k norm,
rotary embedding (all or the first `rotary_dim` dims of a head), the paged KV cache write, the backend's
prefill/decode kernels over the step's tokens, and the output projection."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tgi.core.interfaces.types import AttentionLayerSpec
from tgi.core.models.context import AttentionContext
from tgi.core.models.layers import LinearFactory
from tgi.core.models.rotary import apply_rotary


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: AttentionContext, layer_idx: int,
    spec: AttentionLayerSpec,
) -> torch.Tensor:  # fmt: skip
    """Write k/v [T, Hkv, D] at the step's slots and attend q [T, H, D]: prefill tokens through the
    backend's `prefill`, decode tokens through its `decode`. Returns [T, H, D] (padding tokens past the
    prefill and decode tokens, if any, are left zero)."""
    t = q.shape[0]
    meta = ctx.meta
    ctx.kv_cache.write(layer_idx, k, v, meta.slot_mapping)
    tp, td = meta.num_prefill_tokens, meta.num_decode_tokens
    if td == 0 and tp == t:
        return ctx.backend.prefill(q, k, v, ctx.kv_cache, layer_idx, meta, spec)
    if tp == 0 and td == t:
        return ctx.backend.decode(q, ctx.kv_cache, layer_idx, meta, spec)
    out = q.new_zeros(q.shape)  # a mixed step
    if tp:
        out[:tp] = ctx.backend.prefill(q[:tp], k[:tp], v[:tp], ctx.kv_cache, layer_idx, meta, spec)
    if td:
        out[tp : tp + td] = ctx.backend.decode(q[tp : tp + td], ctx.kv_cache, layer_idx, meta, spec)
    return out


class Attention(nn.Module):
    """Self-attention of one layer, per rank (`spec` holds this rank's heads).

    The fused projection is one column linear with parts "q", "k", "v" (so tensor parallelism splits and,
    where there are fewer key/value heads than ranks, replicates them); its attribute name and the output
    projection's follow the checkpoint (`names`, default `("qkv_proj", "o_proj")`). `qk_norm` builds a
    norm over `head_dim` applied to every query and key head before the rotation (Qwen3). `rotary_dim`
    below `head_dim` rotates only the first `rotary_dim` dims of each head (partial rotary).
    """

    #: callable(qkv [T, (H + 2 Hkv) * Dh], cos, sin, H + Hkv, Dh) rotating q and k in place as
    #: `apply_rotary` does, set by a backend; used only where it applies (whole-head rotary, no q/k norm)
    rotary_kernel = None

    def __init__(
        self,
        hidden_size: int,
        spec: AttentionLayerSpec,
        layer_idx: int,
        linear: LinearFactory,
        dtype: torch.dtype,
        device: object,
        *,
        qkv_bias: bool,
        o_bias: bool,
        qk_norm: Callable[[int], nn.Module] | None = None,
        rotary_dim: int | None = None,
        names: tuple[str, str] = ("qkv_proj", "o_proj"),
    ) -> None:
        super().__init__()
        self.spec = spec
        self.layer_idx = layer_idx
        h, hkv, dh = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.q_size, self.kv_size = h * dh, hkv * dh
        self._qkv_name, self._o_name = names
        qkv = linear.merged_column(
            hidden_size, [self.q_size, self.kv_size, self.kv_size], ["q", "k", "v"], qkv_bias,
            dtype=dtype, device=device,
        )  # fmt: skip
        o_proj = linear.row(h * dh * linear.tp_size, hidden_size, o_bias, dtype=dtype, device=device)
        setattr(self, self._qkv_name, qkv)
        setattr(self, self._o_name, o_proj)
        if qk_norm is not None:
            self.q_norm, self.k_norm = qk_norm(dh), qk_norm(dh)
        self.has_qk_norm = qk_norm is not None
        self.rotary_dim = dh if rotary_dim is None else rotary_dim

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        """x [T, hidden], cos/sin [T, 1, rotary_dim // 2] -> [T, hidden]."""
        t, spec = x.shape[0], self.spec
        qkv = getattr(self, self._qkv_name)(x)
        fused_rotary = (
            self.rotary_kernel is not None and not self.has_qk_norm and self.rotary_dim == spec.head_dim
        )
        if fused_rotary:
            self.rotary_kernel(qkv, cos, sin, spec.num_heads + spec.num_kv_heads, spec.head_dim)
        # slices rather than `split` (a decode step's Python cost: ~20 us a layer against ~5 on two CPU cores)
        qs, kvs = self.q_size, self.kv_size
        q = qkv[:, :qs].reshape(t, spec.num_heads, spec.head_dim)
        k = qkv[:, qs : qs + kvs].reshape(t, spec.num_kv_heads, spec.head_dim)
        v = qkv[:, qs + kvs : qs + 2 * kvs].reshape(t, spec.num_kv_heads, spec.head_dim)
        if self.has_qk_norm:
            q, k = self.q_norm(q)[0], self.k_norm(k)[0]
        if not fused_rotary:
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        out = paged_attention(q, k, v, ctx, self.layer_idx, spec)
        return getattr(self, self._o_name)(out.reshape(t, self.q_size))

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.rotary_dim == x.shape[-1]:
            return apply_rotary(x, cos, sin)
        r = self.rotary_dim
        return torch.cat((apply_rotary(x[..., :r], cos, sin), x[..., r:]), dim=-1)
