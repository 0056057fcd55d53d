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
#: "longrope" (Phi-3) switches from short to long factors by sequence length: see `LongRotaryEmbedding`.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic", "longrope")


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


def rotary_dim_of(config: Any) -> int:
    """How many dims of each head rotate (`partial_rotary_factor` of them; all by default)."""
    params = rope_parameters(config)
    factor = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None) or 1.0)
    return int(head_dim_of(config) * factor)


def compute_inv_freq(config: Any, device: torch.device | str | None = None) -> tuple[torch.Tensor, float]:
    """(inverse frequencies [head_dim // 2] float32, attention scaling applied to cos/sin)."""
    params = rope_parameters(config)
    rope_type = params["rope_type"]
    if rope_type not in SUPPORTED_ROPE_TYPES:
        from tgi.core.models.registry import UnsupportedModelError

        raise UnsupportedModelError(
            f"rope scaling type '{rope_type}' is not supported (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
        )
    dim = rotary_dim_of(config)
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

    #: whether `cos_sin` needs each token's sequence length (`seq_lens`)
    needs_seq_lens = False

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype, seq_lens: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape [T, 1, rotary_dim // 2] in `dtype` (computed in float32, as transformers does)."""
        return self._cos_sin(positions.to(torch.float32)[:, None] * self.inv_freq[None, :], dtype)

    def _cos_sin(self, freqs: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = freqs.cos(), freqs.sin()
        if self.attention_scaling != 1.0:
            cos, sin = cos * self.attention_scaling, sin * self.attention_scaling
        return cos.to(dtype)[:, None, :], sin.to(dtype)[:, None, :]


class LongRotaryEmbedding(RotaryEmbedding):
    """LongRoPE (Phi-3): short factors while a sequence is at most `original_max_position_embeddings`
    long, long factors past it. transformers decides per forward call by the longest sequence in it; we
    decide per sequence and step, by the sequence's length at the end of the step (`seq_lens`, one per
    token), which is the same for one sequence generated alone. Keys already in the KV cache keep the
    rotation they were written with, as in transformers' cache."""

    needs_seq_lens = True

    def __init__(self, config: Any, device: torch.device | str | None = None) -> None:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        params = rope_parameters(config)
        self.original_max = int(
            params.get("original_max_position_embeddings") or config.original_max_position_embeddings
        )
        short, scaling = ROPE_INIT_FUNCTIONS["longrope"](config, device)
        long, _ = ROPE_INIT_FUNCTIONS["longrope"](config, device, seq_len=self.original_max + 1)
        super().__init__(short, float(scaling))
        self.long_inv_freq = long.float().to(device)

    def to(self, device: torch.device | str) -> LongRotaryEmbedding:
        self.long_inv_freq = self.long_inv_freq.to(device)
        return super().to(device)

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype, seq_lens: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if seq_lens is None:
            raise ValueError("LongRoPE needs each token's sequence length")
        long = (seq_lens > self.original_max)[:, None]
        inv_freq = torch.where(long, self.long_inv_freq[None, :], self.inv_freq[None, :])
        return self._cos_sin(positions.to(torch.float32)[:, None] * inv_freq, dtype)


class MRotaryEmbedding(RotaryEmbedding):
    """Multimodal RoPE (Qwen2-VL): each token has three positions (temporal, height, width); the rotary
    frequencies are cut into `mrope_section` runs (their sum is `rotary_dim // 2`) and run k rotates by
    position k. Positions [T] (a step whose tokens have three equal positions, e.g. every decode) give
    plain RoPE, which is the same arithmetic; positions [3, T] the sectioned one."""

    def __init__(self, inv_freq: torch.Tensor, mrope_section: list[int], attention_scaling: float = 1.0):
        if sum(mrope_section) != inv_freq.numel() or len(mrope_section) != 3:
            raise ValueError(
                f"mrope_section {list(mrope_section)} must be three runs summing to the {inv_freq.numel()} "
                "rotary frequencies (rotary_dim // 2)"
            )
        super().__init__(inv_freq, attention_scaling)
        #: [rotary_dim // 2] int64: which of the three positions each frequency rotates by
        self.section_of = torch.repeat_interleave(torch.arange(3), torch.tensor(list(mrope_section)))

    def to(self, device: torch.device | str) -> MRotaryEmbedding:
        self.section_of = self.section_of.to(device)
        return super().to(device)

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype, seq_lens: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if positions.dim() == 1:
            return super().cos_sin(positions, dtype, seq_lens)
        freqs = positions.to(torch.float32)[:, :, None] * self.inv_freq[None, None, :]  # [3, T, D/2]
        index = self.section_of[None, None, :].expand(1, freqs.shape[1], -1)
        return self._cos_sin(freqs.gather(0, index)[0], dtype)


def rotary_embedding(config: Any, device: torch.device | str | None = None) -> RotaryEmbedding:
    """The rotary embedding of `config` (LongRoPE where it says so), on `device`."""
    if rope_parameters(config)["rope_type"] == "longrope":
        return LongRotaryEmbedding(config).to(device or "cpu")
    inv_freq, scaling = compute_inv_freq(config)
    return RotaryEmbedding(inv_freq, scaling).to(device or "cpu")


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on x [T, H, D] with cos/sin [T, 1, D/2]: the same arithmetic as transformers'
    `x * cat(cos, cos) + rotate_half(x) * cat(sin, sin)`."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
