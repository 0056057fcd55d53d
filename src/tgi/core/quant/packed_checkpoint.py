"""Reading a quantized checkpoint's packed tensors as stored (GPTQ, AWQ, FP8 / compressed-tensors).

`split_quantized` sits between the checkpoint's tensor stream and the model's `load_weights`: tensors of a
quantized linear (`<prefix>.qweight`, `.qzeros`, `.scales`, `.g_idx`; Marlin's `.B`, `.s`; FP8's float8 `.weight`,
`.weight_scale`, `.input_scale`) are kept aside, the linear's dense parameter is dropped before anything
is written to it (`drop_dense_weight`), and the rest (norms, embeddings, biases, dense layers) goes on.
`build_weights` then makes one `QuantizedWeight` per linear, named `<prefix>.weight` as a dense checkpoint
would name it (for `CausalLM.attach_quantized_weights`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from tgi.core.interfaces.quantization import QuantizationSpec
from tgi.core.quant.weights import AWQWeight, FP8Weight, GPTQWeight, QuantizedWeight

_INT_SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")
_MARLIN_SUFFIXES = ("B", "s")
_FP8_SUFFIXES = ("weight_scale", "input_scale")


def _quantized_part(name: str, tensor: torch.Tensor, spec: QuantizationSpec) -> tuple[str, str] | None:
    prefix, _, suffix = name.rpartition(".")
    if spec.weight_format == "fp8":
        if suffix in _FP8_SUFFIXES or (suffix == "weight" and tensor.dtype == torch.float8_e4m3fn):
            return prefix, suffix
        if suffix == "weight_scale_inv":
            raise ValueError(f"{name}: block-wise FP8 scales are not supported (per-tensor, per-channel)")
        return None
    suffixes = _MARLIN_SUFFIXES if spec.method == "marlin" else _INT_SUFFIXES
    return (prefix, suffix) if suffix in suffixes else None


def split_quantized(
    model: torch.nn.Module,
    weights: Iterable[tuple[str, torch.Tensor]],
    spec: QuantizationSpec,
    store: dict[str, dict[str, torch.Tensor]],
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield the dense tensors of `weights`; put the quantized linears' tensors in `store[prefix][suffix]`
    and drop those linears' dense parameters from `model`."""
    from tgi.core.quant.kernels import drop_dense_weight

    modules = dict(model.named_modules())
    for name, tensor in weights:
        part = _quantized_part(name, tensor, spec)
        if part is None:
            yield name, tensor
            continue
        prefix, suffix = part
        store.setdefault(prefix, {})[suffix] = tensor
        target, _ = model.checkpoint_target(f"{prefix}.weight")
        module = modules.get(target.rpartition(".")[0])
        if module is None or not hasattr(type(module), "linear_kernel"):
            raise ValueError(f"quantized tensor {name} does not belong to a linear layer of the model")
        if "weight" in module._parameters:
            drop_dense_weight(module)


def build_weights(
    store: dict[str, dict[str, torch.Tensor]], spec: QuantizationSpec, device: torch.device
) -> Iterator[tuple[str, QuantizedWeight]]:
    """`(<prefix>.weight, QuantizedWeight)` for every linear gathered by `split_quantized`."""
    make = {"fp8": _fp8, "awq-int4": _awq}.get(
        spec.weight_format, _marlin if spec.method == "marlin" else _gptq
    )
    for prefix, parts in store.items():
        try:
            tensors = {k: v.to(device) for k, v in parts.items()}
            yield f"{prefix}.weight", make(tensors, spec)
        except KeyError as e:
            raise ValueError(f"quantized layer {prefix}: tensor {prefix}.{e.args[0]} is missing") from None
        except ValueError as e:
            raise ValueError(f"quantized layer {prefix}: {e}") from None


def _gptq(t: dict[str, torch.Tensor], spec: QuantizationSpec) -> GPTQWeight:
    qweight = t["qweight"]
    cols, rows = qweight.shape[0] * 32 // spec.bits, qweight.shape[1]
    group_size = spec.group_size or cols
    g_idx = t.get("g_idx")
    if g_idx is not None:
        g_idx = g_idx.to(torch.int32)
        trivial = torch.arange(cols, device=g_idx.device, dtype=torch.int32) // group_size
        if torch.equal(g_idx, trivial):
            g_idx = None  # groups in input order: no permutation needed
    return GPTQWeight(
        spec.bits, qweight, t["qzeros"], t["scales"], g_idx, group_size, spec.zeros_minus_one, rows, cols
    )


def _marlin(t: dict[str, torch.Tensor], spec: QuantizationSpec) -> GPTQWeight:
    from tgi.core.quant.marlin import marlin_to_gptq

    return marlin_to_gptq(t["B"], t["s"], spec.group_size)


def _awq(t: dict[str, torch.Tensor], spec: QuantizationSpec) -> AWQWeight:
    qweight = t["qweight"]
    cols, rows = qweight.shape[0], qweight.shape[1] * 8
    return AWQWeight(qweight, t["qzeros"], t["scales"], spec.group_size or cols, rows, cols)


def _fp8(t: dict[str, torch.Tensor], spec: QuantizationSpec) -> FP8Weight:
    weight = t["weight"]
    rows, cols = weight.shape
    scale = t["weight_scale"].float().reshape(-1)
    if scale.numel() == 1:
        scale = scale.expand(rows).contiguous()  # per-tensor: the same scale on every row, exactly
    elif scale.numel() != rows:
        raise ValueError(f"weight_scale of {scale.numel()} values fits neither per-tensor nor per-channel")
    input_scale = t.get("input_scale")
    if input_scale is not None:
        input_scale = input_scale.float().reshape(-1).max()
    return FP8Weight(weight, scale, rows, cols, input_scale)
