"""`--kv-cache-dtype`: what a quantized cache costs a block (the same memory holds ~2x the tokens of bfloat16),
a value no backend stores refused by name, a backend that does not store it refused at start naming the flag,
and a float8 checkpoint's k/v scales taken out of its weights for the cache."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file, save_file

from tgi.backends.cpu.backend import CpuBackend
from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.engine_startup import derive_limits
from tgi.core.interfaces import KVCacheSpec, MemoryInfo, ModelInfo
from tgi.core.quant.kv_scales import KVScales
from tgi.core.testing.model import backend_registry, write_tiny_llama

SPEC = KVCacheSpec(num_layers=30, num_kv_heads=3, head_dim=64, block_size=16, dtype="bfloat16")
INFO = ModelInfo("LlamaForCausalLM", 49152, 8192, (2,), "bfloat16", 135_000_000)


class Runner:
    def __init__(self, spec):
        self.spec = spec

    def kv_cache_spec(self):
        return self.spec

    def memory_info(self):
        return MemoryInfo(total=8 << 30, free=8 << 30)


@pytest.mark.parametrize("kv", ["int8", "fp8_e4m3fn", "fp8_e5m2"])
def test_a_one_byte_cache_holds_about_twice_the_tokens_in_the_same_memory(kv):
    quantized = dataclasses.replace(SPEC, kv_dtype=kv)
    # one byte a value and a float32 scale per token and kv head: 64 + 4 bytes where bfloat16 takes 128
    assert quantized.bytes_per_block == 2 * 30 * 16 * 3 * (64 + 4)
    config = EngineConfig(kv_cache_memory_fraction=0.5, max_num_seqs=4096)
    dense = derive_limits(config, INFO, Runner(SPEC), CpuBackend).max_batch_total_tokens
    small = derive_limits(config, INFO, Runner(quantized), CpuBackend).max_batch_total_tokens
    assert small / dense >= 1.8, (small, dense)
    assert (
        quantized.describe_kv()
        == f"{kv} (a float32 scale per token and kv head; 1.88x the tokens of bfloat16)"
    )
    assert SPEC.describe_kv() == "bfloat16"


def test_an_unknown_kv_dtype_is_refused_naming_the_values():
    with pytest.raises(
        ConfigError, match=r"--kv-cache-dtype fp8: unknown value .*auto, fp8_e4m3fn, fp8_e5m2, int8"
    ):
        EngineConfig(kv_cache_dtype="fp8")


class DenseOnlyCpu(CpuBackend):
    name = "dense-only"

    def kv_cache_dtypes(self, dtype):
        return ("auto",)


def test_a_backend_that_does_not_store_it_is_refused_at_start(tmp_path):
    model = write_tiny_llama(tmp_path / "m")
    config = EngineConfig(model_id=str(model), backend="dense-only", kv_cache_dtype="int8", dtype="float32")
    with pytest.raises(ConfigError, match="--kv-cache-dtype int8: backend 'dense-only' does not store the KV cache "
                       "as int8 \\(it stores: auto"):  # fmt: skip
        LLMEngine.from_config(config, registry=backend_registry("dense-only", DenseOnlyCpu))


def test_checkpoint_kv_scales_are_taken_out_of_the_weights():
    scales = KVScales()
    weights = [
        ("model.layers.0.self_attn.k_scale", torch.tensor(0.5)),
        ("model.layers.0.self_attn.v_scale", torch.tensor([0.25])),
        ("model.layers.0.mlp.down_proj.weight", torch.ones(2, 2)),
        ("model.layers.1.self_attn.kv_scale", torch.tensor(2.0)),  # one for both
        ("model.layers.2.self_attn.k_proj.output_scale", torch.tensor([1.0, 3.0])),  # the largest of several
        ("model.layers.2.self_attn.v_proj.output_scale", torch.tensor(4.0)),
    ]
    kept = [name for name, _ in scales.take(weights)]
    assert kept == ["model.layers.0.mlp.down_proj.weight"]
    assert scales.for_layers(range(3)) == ((0.5, 0.25), (2.0, 2.0), (3.0, 4.0))
    assert scales.for_layers([1, 2]) == ((2.0, 2.0), (3.0, 4.0))  # a pipeline stage's own layers
    with pytest.raises(ValueError, match="missing for layers \\[3\\]"):
        scales.for_layers(range(4))
    fp8 = scales.apply(SPEC, "fp8_e4m3fn", range(3))
    assert fp8.kv_scales == ((0.5, 0.25), (2.0, 2.0), (3.0, 4.0)) and fp8.kv_dtype == "fp8_e4m3fn"
    assert scales.apply(SPEC, "int8", range(3)).kv_scales == ()  # int8 computes its own
    assert KVScales().apply(SPEC, "fp8_e5m2", range(3)).kv_scales == ()  # none shipped: computed per token
    select = scales.selecting(lambda name: slice(0, 1))  # a rank's slice of a sharded tensor
    assert select("model.layers.0.self_attn.k_scale") is True and select("x.weight") == slice(0, 1)


def test_a_float8_checkpoint_with_kv_scales_loads_and_its_cache_uses_them(tmp_path):
    model = write_tiny_llama(tmp_path / "m")
    weights = load_file(model / "model.safetensors")
    for i in range(2):
        weights[f"model.layers.{i}.self_attn.k_scale"] = torch.tensor(0.05 * (i + 1))
        weights[f"model.layers.{i}.self_attn.v_scale"] = torch.tensor(0.02)
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    for kv, expected in (("fp8_e4m3fn", ((0.05, 0.02), (0.1, 0.02))), ("auto", ())):
        config = EngineConfig(
            model_id=str(model), dtype="float32", kv_cache_dtype=kv, max_batch_total_tokens=512
        )
        engine = LLMEngine.from_config(config)
        spec = engine.runner.kv_cache_spec()
        assert spec.kv_dtype == kv
        assert [tuple(round(s, 6) for s in pair) for pair in spec.kv_scales] == list(expected)
        assert engine.generate([[5, 6, 7]])[0].token_ids  # it runs
