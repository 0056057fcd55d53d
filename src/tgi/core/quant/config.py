"""Which quantization a model loads with: the checkpoint's `quantization_config` (config.json, as
transformers and TGI read it) and `--quantize`, resolved once to a `QuantizationSpec` or refused with
`ConfigError` naming the reason and what is supported. No torch here."""

from __future__ import annotations

from typing import Any

from tgi.core.config import ConfigError
from tgi.core.interfaces.quantization import QUANTIZE_METHODS, QuantizationSpec

#: --quantize values that quantize a dense checkpoint while loading -> the weight format made
LOAD_TIME = {
    "eetq": ("int8", 8),
    "fp8": ("fp8", 8),
    "bitsandbytes": ("bnb-int8", 8),
    "bitsandbytes-nf4": ("bnb-nf4", 4),
    "bitsandbytes-fp4": ("bnb-fp4", 4),
}
#: --quantize values that need a checkpoint quantized in that format
FROM_CHECKPOINT = ("gptq", "awq", "compressed-tensors", "marlin", "exl2")

_NOT_HERE = {"exl2": "exl2 (ExLlamaV2) kernels are not built into tgi"}


def check_quantize_value(quantize: str | None) -> None:
    """Raise `ConfigError` for a `--quantize` value that is not one of TGI's, naming them."""
    if quantize is not None and quantize not in QUANTIZE_METHODS:
        raise ConfigError(f"--quantize {quantize}: unknown value (one of: {', '.join(QUANTIZE_METHODS)})")


def resolve_quantization(hf_config: Any, quantize: str | None, source_format: str) -> QuantizationSpec | None:
    """The spec a model loads with, or None for dense weights (GGUF blocks are the loader's business).

    `hf_config.quantization_config` (a dict, or an object with `to_dict`) decides for a quantized
    checkpoint; `--quantize` must then agree with it. Without one, `--quantize` asks for load-time
    quantization (eetq, fp8, bitsandbytes*); a value that needs a quantized checkpoint is refused."""
    check_quantize_value(quantize)
    qc = getattr(hf_config, "quantization_config", None)
    if qc is not None and not isinstance(qc, dict):
        qc = qc.to_dict()
    if source_format == "gguf":
        if quantize:
            raise ConfigError(
                f"--quantize {quantize}: a GGUF file is quantized as stored (its blocks load as they are); "
                "give --quantize only with a safetensors checkpoint"
            )
        return None
    if qc:
        return _from_checkpoint(qc, quantize)
    if quantize is None:
        return None
    if quantize in _NOT_HERE:
        raise ConfigError(f"--quantize {quantize}: {_NOT_HERE[quantize]}")
    if quantize in FROM_CHECKPOINT:
        raise ConfigError(
            f"--quantize {quantize} needs a checkpoint quantized with {quantize} (its config.json has a "
            f"quantization_config); this one has none. Quantized while loading: {', '.join(LOAD_TIME)}"
        )
    weight_format, bits = LOAD_TIME[quantize]
    return QuantizationSpec(quantize, weight_format, "load-time", bits)


def _from_checkpoint(qc: dict, quantize: str | None) -> QuantizationSpec:
    method = str(qc.get("quant_method", "")).lower()
    if method == "gptq" and str(qc.get("checkpoint_format", "gptq")).lower() == "marlin":
        method = "marlin"  # AutoGPTQ's Marlin serialisation: the same B / s tensors
    if method in _NOT_HERE:
        raise ConfigError(f"this checkpoint is quantized with {method}: {_NOT_HERE[method]}")
    if method in ("bitsandbytes", "bitsandbytes-nf4", "bitsandbytes-fp4") or method.startswith(
        "bitsandbytes"
    ):
        raise ConfigError(
            "this checkpoint stores bitsandbytes-quantized weights: tgi does not read them; serve the "
            "unquantized checkpoint with --quantize bitsandbytes-nf4 (or -fp4, bitsandbytes) instead"
        )
    readers = {
        "gptq": _gptq,
        "awq": _awq,
        "marlin": _marlin,
        "fp8": _fp8,
        "compressed-tensors": _compressed_tensors,
    }
    if method not in readers:
        raise ConfigError(
            f"quantization_config.quant_method {method!r} is not supported (checkpoints tgi reads: "
            f"{', '.join(readers)})"
        )
    spec = readers[method](qc)
    # TGI names FP8 checkpoints of either kind "fp8"; --quantize must agree with the checkpoint
    agrees = quantize in (None, spec.method) or (quantize == "fp8" and spec.weight_format == "fp8")
    if not agrees:
        raise ConfigError(
            f"--quantize {quantize}: this checkpoint is already quantized with {spec.method} "
            f"(quantization_config); give --quantize {spec.method} or none"
        )
    return spec


def _group(qc: dict) -> int | None:
    size = qc.get("group_size", -1)
    return None if size in (None, -1, 0) else int(size)


def _gptq(qc: dict) -> QuantizationSpec:
    bits = int(qc.get("bits", 4))
    if bits not in (4, 8):
        raise ConfigError(f"GPTQ with {bits} bits is not supported (4 or 8)")
    fmt = str(qc.get("checkpoint_format", "gptq")).lower()
    if fmt not in ("gptq", "gptq_v2"):
        raise ConfigError(f"GPTQ checkpoint_format {fmt!r} is not supported (gptq, gptq_v2)")
    return QuantizationSpec(
        "gptq",
        f"gptq-int{bits}",
        "checkpoint",
        bits,
        group_size=_group(qc),
        desc_act=bool(qc.get("desc_act", False)),
        sym=bool(qc.get("sym", True)),
        zeros_minus_one=fmt == "gptq",
        exclude=tuple(qc.get("modules_to_not_convert") or ()),
    )


def _marlin(qc: dict) -> QuantizationSpec:
    bits = int(qc.get("bits", 4))
    if bits != 4 or not qc.get("sym", True) or qc.get("desc_act", False):
        raise ConfigError(
            "Marlin checkpoints are read as 4-bit, symmetric, without act-order (this one is not)"
        )
    # converted at load to the GPTQ layout (tgi.core.quant.marlin), which the int4 kernels read
    return QuantizationSpec(
        "marlin",
        "gptq-int4",
        "checkpoint",
        4,
        group_size=_group(qc),
        exclude=tuple(qc.get("modules_to_not_convert") or ()),
    )


def _awq(qc: dict) -> QuantizationSpec:
    version = str(qc.get("version", "gemm")).lower()
    bits = int(qc.get("bits", qc.get("w_bit", 4)))
    if version != "gemm" or bits != 4:
        raise ConfigError(f"AWQ {version} with {bits} bits is not supported (the GEMM packing, 4 bits)")
    if not qc.get("zero_point", True):
        raise ConfigError("AWQ without zero points is not supported (zero_point: true)")
    return QuantizationSpec(
        "awq",
        "awq-int4",
        "checkpoint",
        4,
        group_size=_group({"group_size": qc.get("group_size", qc.get("q_group_size", 128))}),
        sym=False,
        exclude=tuple(qc.get("modules_to_not_convert") or ()),
    )


def _fp8(qc: dict) -> QuantizationSpec:
    if qc.get("weight_block_size"):
        raise ConfigError(
            f"FP8 checkpoints with block-wise scales (weight_block_size {qc['weight_block_size']}) are not "
            "supported (per-tensor and per-channel scales are)"
        )
    scheme = str(qc.get("activation_scheme", "dynamic")).lower()
    return QuantizationSpec(
        "fp8",
        "fp8",
        "checkpoint",
        8,
        activation_scale="static" if scheme == "static" else "dynamic",
        exclude=tuple(qc.get("modules_to_not_convert") or qc.get("ignored_layers") or ()),
    )


def _compressed_tensors(qc: dict) -> QuantizationSpec:
    fmt = str(qc.get("format", "")).lower()
    groups = list((qc.get("config_groups") or {}).values())
    why = None
    if fmt not in ("float-quantized", "naive-quantized"):
        why = f"format {fmt!r}"
    elif len(groups) != 1:
        why = f"{len(groups)} config groups"
    else:
        w = groups[0].get("weights") or {}
        if (w.get("type"), int(w.get("num_bits", 0))) != ("float", 8):
            why = f"{w.get('num_bits')}-bit {w.get('type')} weights"
        elif w.get("strategy") not in ("tensor", "channel"):
            why = f"weight scales by {w.get('strategy')}"
    if why is not None:
        raise ConfigError(
            f"compressed-tensors checkpoint with {why} is not supported (tgi reads FP8 weights, "
            "float-quantized, one config group, per-tensor or per-channel scales)"
        )
    act = groups[0].get("input_activations") or {}
    scale = "none" if not act else ("dynamic" if act.get("dynamic", True) else "static")
    return QuantizationSpec(
        "compressed-tensors",
        "fp8",
        "checkpoint",
        8,
        activation_scale=scale,
        exclude=tuple(qc.get("ignore") or ()),
    )
