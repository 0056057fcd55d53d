"""Which quantization a model loads with (`tgi.core.quant.config`) and the refusals at start-up: an unknown
`--quantize` value, a format tgi does not read, a value that needs a quantized checkpoint, and a format the
chosen backend has no kernel for, each with the reason and the supported values."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tgi.core.config import ConfigError, EngineConfig
from tgi.core.interfaces import QUANTIZE_METHODS, UnsupportedError
from tgi.core.quant.config import resolve_quantization


def cfg(qc=None):
    return SimpleNamespace(quantization_config=qc)


def test_unknown_quantize_value_names_the_supported_ones():
    with pytest.raises(ConfigError, match=r"--quantize int3: unknown value \(one of: awq, bitsandbytes"):
        EngineConfig(quantize="int3")
    assert "eetq" in QUANTIZE_METHODS and "exl2" in QUANTIZE_METHODS


def test_checkpoint_configs_are_read_as_transformers_writes_them():
    spec = resolve_quantization(
        cfg({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": False}),
        None,
        "safetensors",
    )
    assert (spec.method, spec.weight_format, spec.group_size, spec.desc_act, spec.sym) == (
        "gptq",
        "gptq-int4",
        128,
        True,
        False,
    )
    assert spec.zeros_minus_one  # checkpoint_format "gptq" (v1) by default
    v2 = resolve_quantization(
        cfg({"quant_method": "gptq", "bits": 8, "checkpoint_format": "gptq_v2"}), "gptq", "safetensors"
    )
    assert (v2.weight_format, v2.zeros_minus_one, v2.group_size) == ("gptq-int8", False, None)
    awq = resolve_quantization(
        cfg({"quant_method": "awq", "bits": 4, "group_size": 64, "version": "GEMM"}), None, "safetensors"
    )
    assert (awq.weight_format, awq.group_size) == ("awq-int4", 64)
    fp8 = resolve_quantization(
        cfg({"quant_method": "fp8", "activation_scheme": "static"}), "fp8", "safetensors"
    )
    assert (fp8.weight_format, fp8.activation_scale) == ("fp8", "static")
    marlin = resolve_quantization(
        cfg({"quant_method": "gptq", "checkpoint_format": "marlin", "group_size": 128}), None, "safetensors"
    )
    assert (marlin.method, marlin.weight_format, marlin.group_size) == ("marlin", "gptq-int4", 128)
    assert resolve_quantization(cfg({"quant_method": "marlin"}), "marlin", "safetensors").method == "marlin"
    assert resolve_quantization(cfg(), "eetq", "safetensors").source == "load-time"
    assert resolve_quantization(cfg(), None, "safetensors") is None


@pytest.mark.parametrize(
    ("qc", "quantize", "fmt", "message"),
    [
        (
            {"quant_method": "gptq", "checkpoint_format": "marlin", "desc_act": True},
            None,
            "safetensors",
            "Marlin checkpoints are read as 4-bit, symmetric, without act-order",
        ),
        ({"quant_method": "exl2"}, None, "safetensors", "exl2 .ExLlamaV2. kernels are not built"),
        ({"quant_method": "gptq", "bits": 3}, None, "safetensors", "GPTQ with 3 bits is not supported"),
        ({"quant_method": "awq", "version": "gemv"}, None, "safetensors", "AWQ gemv"),
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, None, "safetensors", "block-wise scales"),
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True},
            None,
            "safetensors",
            "bitsandbytes-quantized",
        ),
        (
            {"quant_method": "compressed-tensors", "format": "pack-quantized"},
            None,
            "safetensors",
            "pack-quantized",
        ),
        ({"quant_method": "gptq"}, "awq", "safetensors", "already quantized with gptq"),
        (None, "gptq", "safetensors", "needs a checkpoint quantized with gptq"),
        (None, "marlin", "safetensors", "--quantize marlin needs a checkpoint quantized with marlin"),
        (None, "exl2", "safetensors", "--quantize exl2: exl2"),
        (None, "eetq", "gguf", "a GGUF file is quantized as stored"),
    ],
)
def test_refusals_name_the_reason(qc, quantize, fmt, message):
    with pytest.raises(ConfigError, match=message):
        resolve_quantization(cfg(qc), quantize, fmt)


def test_a_backend_refuses_a_format_it_has_no_kernel_for_naming_its_formats():
    from tgi.backends.cpu.backend import CpuBackend

    backend = CpuBackend()
    assert {"gptq-int4", "gptq-int8", "awq-int4", "fp8", "int8"} <= set(backend.weight_formats("bfloat16"))
    with pytest.raises(UnsupportedError, match=r"no kernel for exl2 weights .* \(it computes: awq-int4, "):
        backend.check_weight_format("exl2", "bfloat16")


def test_quantized_weights_are_not_sharded_over_ranks():
    """Tensor parallelism over packed tensors is refused at load, with the reason."""
    from tgi.backends.cpu.backend import CpuBackend
    from tgi.core.loading.source import ModelSource
    from tgi.core.quant.quantized_loading import QuantizedLoading

    source = ModelSource("m", "safetensors", "/nonexistent", "/nonexistent")
    loading = QuantizedLoading(CpuBackend(), cfg(), "eetq", source, "bfloat16")
    with pytest.raises(UnsupportedError, match="not sharded over --num-shard ranks"):
        loading.check(object(), tp_size=2)
