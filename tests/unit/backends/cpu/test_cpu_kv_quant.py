"""The quantized KV cache's values (`tgi.backends.cpu.kv_quant`): what the reference stores, that the native writer
stores the same bytes, and the cache that holds them."""

from __future__ import annotations

import pytest
import torch

from tgi.backends.cpu import native
from tgi.backends.cpu.kv_cache import create_cpu_kv_cache
from tgi.backends.cpu.kv_quant import CODE_DTYPES, CODE_MAX, dequantize, quantize
from tgi.backends.cpu.quantized_kv_cache import QuantizedCpuKVCache
from tgi.core.interfaces import KVCacheSpec

KV_DTYPES = list(CODE_DTYPES)
needs_native = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)


def test_int8_rounds_each_value_by_at_most_half_a_step_of_its_head():
    x = torch.randn(50, 3, 64) * torch.rand(50, 3, 1) * 10
    x[7, 1] = 0  # an all-zero head: scale 1, codes 0
    codes, scales = quantize(x, "int8")
    assert codes.dtype == torch.int8 and scales.shape == (50, 3)
    assert codes.abs().max() <= 127 and scales[7, 1] == 1 and not codes[7, 1].any()
    assert torch.equal(scales[0], x[0].abs().amax(-1) / 127)
    err = (dequantize(codes, scales, torch.float32) - x).abs()
    assert (err <= scales[..., None] / 2 * (1 + 1e-6)).all()


@pytest.mark.parametrize("kv", ["fp8_e4m3fn", "fp8_e5m2"])
def test_float8_keeps_the_format_s_relative_precision_and_a_fixed_scale_clamps(kv):
    x = torch.randn(40, 2, 32) * 5
    codes, scales = quantize(x, kv)
    assert codes.dtype == CODE_DTYPES[kv]
    assert torch.equal(
        codes.float().abs().amax(-1), torch.full((40, 2), CODE_MAX[kv])
    )  # the largest fills it
    rel = 2.0 ** (-4 if kv == "fp8_e4m3fn" else -3)  # half a step of 3 or 2 mantissa bits
    tiny = scales[..., None] * 2.0 ** (-9 if kv == "fp8_e4m3fn" else -16)  # subnormals: absolute steps
    err = (dequantize(codes, scales, torch.float32) - x).abs()
    assert (err <= x.abs() * rel + tiny).all()
    codes, scales = quantize(x, kv, fixed_scale=1e-5)  # a checkpoint's scale too small for these values
    assert (scales == 1e-5).all() and not codes.float().isnan().any()
    assert codes.float().abs().max() == CODE_MAX[kv]  # clamped, never NaN or inf


@needs_native
@pytest.mark.parametrize("kv", KV_DTYPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_the_native_writer_stores_the_reference_s_bytes(kv, dtype):
    spec = KVCacheSpec(1, 3, 64, 16, "bfloat16", kv)
    gen = torch.Generator().manual_seed(0)
    key = (torch.randn(30, 3, 64, generator=gen) * 3).to(dtype)
    value = torch.randn(30, 3, 64, generator=gen).to(dtype)
    key[4, 2] = 0
    slots = torch.randperm(96, generator=gen)[:30]
    slots[[3, 11]] = -1  # padding: stored nowhere
    fixed = [(None, None)] if kv == "int8" else [(None, None), (0.02, 0.01)]
    for k_scale, v_scale in fixed:
        scales = () if k_scale is None else ((k_scale, v_scale),)
        spec_s = KVCacheSpec(1, 3, 64, 16, "bfloat16", kv, scales)
        torch_cache, native_cache = QuantizedCpuKVCache(spec_s, 6), create_cpu_kv_cache(spec_s, 6, True)
        assert native_cache.native_write is not None
        torch_cache.write(0, key, value, slots)
        native_cache.write(0, key, value, slots)
        for a, b in zip(torch_cache.layer(0), native_cache.layer(0), strict=True):
            assert torch.equal(a.codes.view(torch.uint8), b.codes.view(torch.uint8))
            assert torch.equal(a.scales, b.scales)
        keys, _ = native_cache.layer(0)
        untouched = torch.tensor([s for s in range(96) if s not in slots.tolist()])
        assert not keys.codes.view(torch.uint8).view(-1, 3, 64)[untouched].any()
        assert not keys.scales.view(-1, 3)[untouched].any()
    assert spec.bytes_per_block == 2 * 16 * 3 * (64 + 4)


def test_the_cache_holds_codes_and_scales_per_layer_and_checks_its_scales():
    spec = KVCacheSpec(2, 2, 32, 4, "float32", "fp8_e5m2")
    cache = QuantizedCpuKVCache(spec, 5)
    keys, values = cache.layer(1)
    assert keys.codes.shape == (5, 4, 2, 32) and keys.codes.dtype == torch.float8_e5m2
    assert values.scales.shape == (5, 4, 2) and values.scales.dtype == torch.float32
    assert cache.nbytes() == spec.bytes_per_block * 5
    k = torch.randn(3, 2, 32)
    cache.write(1, k, k, torch.tensor([0, 9, 19]))  # layer 1 only; layer 0 untouched
    got = dequantize(
        keys.codes.view(-1, 2, 32)[[0, 9, 19]], keys.scales.view(-1, 2)[[0, 9, 19]], torch.float32
    )
    assert (got - k).abs().max() <= k.abs().max() * 0.125
    assert not cache.layer(0)[0].codes.view(torch.uint8).any()
    with pytest.raises(ValueError, match="1 pairs of KV scales for 2 layers"):
        QuantizedCpuKVCache(KVCacheSpec(2, 2, 32, 4, "float32", "fp8_e5m2", ((1.0, 1.0),)), 5)
