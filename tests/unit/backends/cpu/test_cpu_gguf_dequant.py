"""The CPU backend's native GGUF dequantization at load (`tgi.backends.cpu.gguf_dequant`) against `gguf`'s
numpy one: the same float32 bits for every block type the loader takes, and the same bfloat16 bits as those
values rounded; the build entry point `python -m tgi.backends.cpu.native build`."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize, quantize  # noqa: E402

from tgi.backends.cpu import native  # noqa: E402
from tgi.core.testing.kquants import K_QUANTS, quantize_k  # noqa: E402

pytestmark = pytest.mark.skipif(not native.compiler_found(), reason="no C++ compiler to build the kernels")


def _weight(rows: int, cols: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
    w[1] = 0.0  # an all-zero row: zero scales
    w[2, :40] *= 1e3  # a block of large values beside small ones
    w[3] = np.abs(w[3])  # all positive: a minimum above zero
    return w


def _stored(w: np.ndarray, qtype: str) -> np.ndarray:
    if qtype in K_QUANTS:
        return quantize_k(w, qtype)
    return quantize(w, gguf.GGMLQuantizationType[qtype])


@pytest.mark.parametrize("qtype", sorted(native.BLOCK_TYPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_dequantization_is_gguf_bit_for_bit(qtype, dtype):
    from tgi.backends.cpu.gguf_dequant import NativeGGUFDequantizer

    rows, cols = 20, 512
    raw = np.ascontiguousarray(_stored(_weight(rows, cols), qtype)).view(np.uint8).reshape(rows, -1)
    expected = np.asarray(dequantize(raw, gguf.GGMLQuantizationType[qtype]), dtype=np.float32)
    expected = torch.from_numpy(expected.reshape(rows, cols)).to(dtype)
    raw.setflags(write=False)  # as the memory map hands it over
    got = NativeGGUFDequantizer(dtype)(raw, qtype, rows, cols)
    assert got.dtype == dtype and got.shape == (rows, cols)
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    assert torch.equal(got.view(bits), expected.view(bits))


@pytest.mark.parametrize("impl", ["reference", "avx512"])
@pytest.mark.parametrize("qtype", sorted(native.BLOCK_TYPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_implementation_is_gguf_bit_for_bit(qtype, dtype, impl):
    if impl not in native.dequantize_impls():
        pytest.skip(f"{MISSING_CPU_FEATURE}: the {impl} path of block_dequantize")
    rows, cols = 7, 1024
    w = _weight(rows, cols)
    w[4, 256:512] = -w[4, 256:512] * 1e-6  # tiny values: products near the bottom of the range
    raw = np.ascontiguousarray(_stored(w, qtype)).view(np.uint8).reshape(rows, -1)
    expected = np.asarray(dequantize(raw, gguf.GGMLQuantizationType[qtype]), dtype=np.float32)
    expected = torch.from_numpy(expected.reshape(rows, cols)).to(dtype)
    got = native.block_dequantize(torch.from_numpy(raw), qtype, rows, cols, dtype, impl=impl)
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    assert torch.equal(got.view(bits), expected.view(bits))


def test_an_unknown_implementation_is_refused():
    with pytest.raises(ValueError, match="unknown dequantization implementation 'fast'"):
        native.block_dequantize(
            torch.zeros(1, 34, dtype=torch.uint8), "Q8_0", 1, 32, torch.float32, impl="fast"
        )


@pytest.mark.parametrize("stored", ["F32", "F16", "BF16"])
def test_float_types_are_converted_as_gguf_values_cast(stored):
    from tgi.backends.cpu.gguf_dequant import NativeGGUFDequantizer

    w = torch.from_numpy(_weight(4, 64)).to(
        {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[stored]
    )
    raw = w.view(torch.uint8).numpy().reshape(4, -1)
    got = NativeGGUFDequantizer(torch.bfloat16)(raw, stored, 4, 64)
    assert torch.equal(got.view(torch.int16), w.float().to(torch.bfloat16).view(torch.int16))


def test_types_without_a_native_path_are_declined():
    from tgi.backends.cpu.gguf_dequant import NativeGGUFDequantizer

    assert NativeGGUFDequantizer(torch.float32)(np.zeros((1, 84), np.uint8), "Q2_K", 1, 256) is None


def test_build_entry_point_reports_the_library():
    out = subprocess.run(
        [sys.executable, "-m", "tgi.backends.cpu.native", "build"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr
    path = out.stdout.strip().rpartition(": ")[2]
    assert path == native.load().__file__ and path.endswith(".so")
