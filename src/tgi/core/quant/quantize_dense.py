"""Quantizing a dense model's linears while loading (`--quantize eetq`, `--quantize fp8`): reference
quantizers in plain torch, one scale per output row, symmetric.

- int8 ("int8", EETQ's scheme): scale = max|W[r]| / 127, q = round(W / scale) in [-127, 127].
- fp8 ("fp8"): scale = max|W[r]| / 448 (float8_e4m3fn's largest finite value), q = (W / scale) in
  float8_e4m3fn (round to nearest).
"""

from __future__ import annotations

import torch

from tgi.core.quant.weights import FP8Weight, Int8Weight, QuantizedWeight

FP8_MAX = float(torch.finfo(torch.float8_e4m3fn).max)  # 448


def _row_scale(w: torch.Tensor, top: float) -> torch.Tensor:
    return (w.abs().amax(dim=1) / top).clamp(min=1e-12)  # [rows]; an all-zero row keeps a tiny scale


def quantize_int8(weight: torch.Tensor) -> Int8Weight:
    """A dense [rows, cols] weight -> symmetric int8 with a float32 scale per row."""
    w = weight.detach().float()
    scale = _row_scale(w, 127.0)
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return Int8Weight(q, scale, *w.shape)


def quantize_fp8(weight: torch.Tensor) -> FP8Weight:
    """A dense [rows, cols] weight -> float8_e4m3fn with a float32 scale per row."""
    w = weight.detach().float()
    scale = _row_scale(w, FP8_MAX)
    q = (w / scale[:, None]).clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return FP8Weight(q, scale, *w.shape)


def quantizer_for(weight_format: str):
    """The load-time quantizer (dense weight -> QuantizedWeight) of a format; `ValueError` if it has none."""
    if weight_format == "int8":
        return quantize_int8
    if weight_format == "fp8":
        return quantize_fp8
    if weight_format.startswith("bnb-"):
        from tgi.core.quant.bnb import bnb_quantizer

        return bnb_quantizer(weight_format)
    raise ValueError(f"no load-time quantizer for {weight_format}")


def quantize_linears(model: torch.nn.Module, weight_format: str, exclude: tuple[str, ...]) -> int:
    """Quantize every linear of `model` (modules with a `linear_kernel` slot) to `weight_format`, except
    those whose name matches `exclude` (a name equal to, or ending in, an entry) and those sharing their
    weight with another module (a tied output head); each gets `quant_weight` and loses its dense weight
    at once (the peak is the dense model, not both). Returns how many."""
    from tgi.core.quant.kernels import drop_dense_weight

    quantize = quantizer_for(weight_format)
    shared = _shared_weights(model)
    count = 0
    for name, module in model.named_modules():
        if not hasattr(type(module), "linear_kernel") or _excluded(name, exclude):
            continue
        if module.weight.is_meta or id(module.weight) in shared:
            continue
        qweight: QuantizedWeight = quantize(module.weight)
        module.quant_weight = qweight
        drop_dense_weight(module)
        count += 1
    return count


def _excluded(name: str, exclude: tuple[str, ...]) -> bool:
    return any(name == e or name.endswith("." + e) or e in name.split(".") for e in exclude)


def _shared_weights(model: torch.nn.Module) -> set[int]:
    seen: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            seen[id(p)] = seen.get(id(p), 0) + 1
    return {k for k, n in seen.items() if n > 1}
