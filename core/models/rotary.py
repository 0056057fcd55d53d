"""Rotary position embeddings (neox / rotate-half style), with positions given per token.

Inverse frequencies come from transformers' `ROPE_INIT_FUNCTIONS` (linear, llama3, yarn, ...) or, for plain
RoPE, from `rope_theta`; the config is read whether it uses `rope_parameters` (transformers 5) or
`rope_scaling` + `rope_theta` (older).
"""

from __future__ import annotations

from typing import Any

import torch

#: rope types whose frequencies do not depend on the sequence length, so per-token positions are exact.
#: "dynamic" (NTK) rescales with the current length in transformers; up to `max_position_embeddings` it
#: equals plain RoPE, which is what we compute.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic")


def rope_parameters(config: Any) -> dict[str, Any]:
    """The rope settings as one dict with at least `rope_type` and `rope_theta`."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and params and not all(isinstance(v, dict) for v in params.values()):
        out = dict(params)
    else:
        scaling = getattr(config, "rope_scaling", None)
        out = dict(scaling) if isinstance(scaling, dict) else {}
    out.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    rope_type = out.get("rope_type", out.get("type")) or "default"
    out["rope_type"] = rope_type
    return out


def head_dim_of(config: Any) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def compute_inv_freq(config: Any, device: torch.device | str | None = None) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [head_dim // 2] float32, attention scaling applied to cos/sin)."""
    params = rope_parameters(config)
    rope_type = params["rope_type"]
    if rope_type not in SUPPORTED_ROPE_TYPES:
        from tgi.core.models.registry import UnsupportedModelError

        raise UnsupportedModelError(
            f"rope scaling type '{rope_type}' is not supported (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
        )
    dim = head_dim_of(config)
    if rope_type in ("default", "dynamic"):
        base = float(params["rope_theta"])
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        return inv_freq.to(device), 1.0
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, device)
    return inv_freq.float().to(device), float(scaling)


class RotaryEmbedding:
    """cos/sin for given positions, and their application to [T, heads, head_dim] tensors."""

    def __init__(self, inv_freq: torch.Tensor, attention_scaling: float = 1.0) -> None:
        self.inv_freq = inv_freq.float()
        self.attention_scaling = attention_scaling

    def to(self, device: torch.device | str) -> RotaryEmbedding:
        self.inv_freq = self.inv_freq.to(device)
        return self

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape [T, 1, head_dim // 2] in `dtype` (computed in float32, as transformers does)."""
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        cos, sin = freqs.cos(), freqs.sin()
        if self.attention_scaling != 1.0:
            cos, sin = cos * self.attention_scaling, sin * self.attention_scaling
        return cos.to(dtype)[:, None, :], sin.to(dtype)[:, None, :]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on x [T, H, D] with cos/sin [T, 1, D/2]: the same arithmetic as transformers'
    `x * cat(cos, cos) + rotate_half(x) * cat(sin, sin)`."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
