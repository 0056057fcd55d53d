"""The CPU linear over GGUF blocks (Q4_0, Q4_1, Q8_0) against the dequantized weight in float64, on each
path (AMX, AVX512-BF16, scalar reference) this CPU has; its wiring from a GGUF checkpoint to the model's
linears."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

from tgi.backends.cpu import native
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.core.loading.block_weights import BLOCK_BYTES, BlockWeight

# without a compiler the kernels cannot be built; with one, a build that fails fails every test
pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)


def random_blocks(qtype: str, rows: int, cols: int, seed: int) -> BlockWeight:
    """Valid random blocks: fp16 scales/mins of sane size, random packed values."""
    g = np.random.default_rng(seed)
    nb, bb = cols // 32, BLOCK_BYTES[qtype]
    raw = g.integers(0, 256, size=(rows, nb, bb), dtype=np.uint8)
    raw[:, :, 0:2] = (
        (g.uniform(0.001, 0.05, size=(rows, nb)).astype(np.float16)).view(np.uint8).reshape(rows, nb, 2)
    )
    if qtype == "Q4_1":
        raw[:, :, 2:4] = (
            (g.uniform(-0.2, 0.0, size=(rows, nb)).astype(np.float16)).view(np.uint8).reshape(rows, nb, 2)
        )
    return BlockWeight(qtype, torch.from_numpy(raw.reshape(rows, nb * bb)), rows, cols)


#: the /proc/cpuinfo flags each implementation needs
CPU_FLAGS = {
    "reference": (),
    "avx512-bf16": ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "f16c", "fma"),
    "amx": ("amx_tile", "amx_bf16", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "f16c", "fma"),
}


def require(impl: str) -> None:
    """Skip when this CPU lacks the instructions `impl` needs, as /proc/cpuinfo lists them (not as the
    kernels report them: a kernel that fails, or a probe of theirs that misses a feature, fails the test)."""
    missing = [flag for flag in CPU_FLAGS[impl] if flag not in cpu_info().flags]
    if missing:
        pytest.skip(f"{MISSING_CPU_FEATURE}: {', '.join(missing)}")
    assert impl in native.block_impls(), f"this CPU has {', '.join(CPU_FLAGS[impl])}, the kernels miss {impl}"


# every block type at every shape (one group of 16 rows and one block; 40 rows: a padded group; 200 x 576:
# several groups over the threads), with the input rows each path splits differently spread over them
SHAPES = [(q, r, c) for q in ("Q4_0", "Q4_1", "Q8_0") for r, c in ((16, 32), (40, 96), (200, 576))]
ROWS = {
    "reference": [1, 3, 37] * 3,  # the plain loops: any row count
    # tiles of 8 rows, then a tail of 1-7 (1, 3, 5, 4, 5): 1, 3, 13, 100, 8, 37, ...
    "avx512-bf16": [1, 3, 13, 100, 8, 37, 16, 13, 100],
    # passes of 48 rows in 1-3 tiles of 16: one partial / full tile, three (37 partial, 48 full), passes of 48 +
    # a tail (100)
    "amx": [1, 16, 37, 100, 48, 13, 3, 37, 100],
}
BF16_CASES = [(impl, *shape, m) for impl, ms in ROWS.items() for shape, m in zip(SHAPES, ms, strict=True)]


@pytest.mark.parametrize(("impl", "qtype", "rows", "cols", "m"), BF16_CASES)
def test_block_linear_equals_the_dequantized_product(qtype, rows, cols, m, impl):
    require(impl)
    block = random_blocks(qtype, rows, cols, seed=rows + m)
    w = block.dequantize()
    # AMX multiplies the weights rounded to bfloat16 (as the dense bfloat16 model holds them); the others
    # multiply the exact values
    w = (w.bfloat16() if impl == "amx" else w).double()
    torch.manual_seed(m)
    x = torch.randn(m, cols).bfloat16()
    bias = torch.randn(rows).bfloat16()
    packed = native.block_pack(block.data, qtype, rows, cols)
    y = native.block_linear(x, packed, qtype, rows, cols, bias, impl=impl)
    assert y.dtype == torch.bfloat16 and y.shape == (m, rows)
    expected = x.double() @ w.T + bias.double()
    # one bfloat16 rounding of the output (2^-8 relative) plus float32 accumulation
    torch.testing.assert_close(y.double(), expected, rtol=2**-8, atol=1e-3 * expected.abs().max().item())


# AVX2 ("auto"): up to 4 rows straight into the sums (1, 2, 3, 4: one kernel each), more through a table of
# widened weights 4 rows at a time and a tail of 1-3 (16: none; 37: 1; 7: 3; 10: 2)
F32_ROWS = {"auto": [1, 2, 3, 4, 16, 37, 7, 10, 37], "reference": [1, 16, 37] * 3}
F32_CASES = [(impl, *shape, m) for impl, ms in F32_ROWS.items() for shape, m in zip(SHAPES, ms, strict=True)]


@pytest.mark.parametrize(("impl", "qtype", "rows", "cols", "m"), F32_CASES)
def test_float32_block_linear_equals_the_dequantized_product(qtype, rows, cols, m, impl):
    """The float32 path (CPUs without bfloat16 arithmetic): "auto" is the AVX2 kernel where the CPU has
    AVX2, FMA and F16C, "reference" the plain loops (x86-64 clones)."""
    if impl == "auto":
        missing = [f for f in ("avx2", "fma", "f16c") if f not in cpu_info().flags]
        if missing:
            pytest.skip(f"{MISSING_CPU_FEATURE}: {', '.join(missing)}")
    block = random_blocks(qtype, rows, cols, seed=rows + m)
    w = block.dequantize().double()
    torch.manual_seed(m)
    x = torch.randn(m, cols)
    bias = torch.randn(rows)
    packed = native.block_pack(block.data, qtype, rows, cols)
    y = native.block_linear(x, packed, qtype, rows, cols, bias, impl=impl)
    assert y.dtype == torch.float32 and y.shape == (m, rows)
    expected = x.double() @ w.T + bias.double()
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q8_0"])
def test_float32_decode_rows_equal_those_rows_of_a_larger_product_bit_for_bit(qtype):
    """Up to 4 rows (decode steps) the AVX2 kernel feeds each column straight into the sums, above it through
    a table of widened weights: the same operations in the same order, so the same bits."""
    missing = [f for f in ("avx2", "fma", "f16c") if f not in cpu_info().flags]
    if missing:
        pytest.skip(f"{MISSING_CPU_FEATURE}: {', '.join(missing)}")
    block = random_blocks(qtype, 40, 576, seed=5)
    packed = native.block_pack(block.data, qtype, 40, 576)
    torch.manual_seed(0)
    x = torch.randn(12, 576)
    whole = native.block_linear(x, packed, qtype, 40, 576)
    for m in (1, 2, 3, 4):
        assert torch.equal(native.block_linear(x[:m], packed, qtype, 40, 576), whole[:m]), m


def test_packed_layout_is_the_size_of_the_blocks_padded_to_16_rows():
    block = random_blocks("Q4_1", 20, 64, seed=0)
    packed = native.block_pack(block.data, "Q4_1", 20, 64)
    assert packed.numel() == 32 * 2 * 20  # 2 groups of 16 rows x 2 blocks x 20 bytes per row-block


def test_block_linear_refuses_what_it_cannot_compute():
    block = random_blocks("Q8_0", 16, 64, seed=1)
    packed = native.block_pack(block.data, "Q8_0", 16, 64)
    with pytest.raises(RuntimeError, match="bfloat16 or float32"):
        native.block_linear(torch.randn(2, 64).half(), packed, "Q8_0", 16, 64)
    with pytest.raises(RuntimeError, match="one implementation"):
        native.block_linear(torch.randn(2, 64), packed, "Q8_0", 16, 64, impl="avx512-bf16")
    with pytest.raises(RuntimeError, match="do not match"):
        native.block_linear(torch.randn(2, 64).bfloat16(), packed, "Q8_0", 32, 64)


def first(weights, wanted: set[str]) -> dict:
    """The `wanted` ones of `weights`, read no further than the last of them (the rest is never loaded)."""
    found = {}
    for name, weight in weights:
        if name in wanted:
            found[name] = weight
            if len(found) == len(wanted):
                break
    return found


def test_gguf_blocks_dequantize_to_the_loaded_weights():
    """The raw blocks the loader hands out (Q/K rows un-permuted) are the dense weights it loads."""
    from tgi.core.loading import iter_weights, load_config, resolve_model
    from tgi.core.loading.block_weights import iter_block_weights

    default_source = resolve_model(None)
    config = load_config(default_source)
    wanted = {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
              "model.layers.0.mlp.down_proj.weight", "model.embed_tokens.weight"}  # fmt: skip
    blocks = first(iter_block_weights(default_source, config, BLOCK_BYTES), wanted)
    dense = first(iter_weights(default_source, config), wanted)
    assert set(blocks) == wanted
    for name in wanted:
        assert torch.equal(blocks[name].dequantize(), dense[name]), name


def test_cpu_backend_asks_for_blocks_for_bfloat16_and_default_float32_models(monkeypatch):
    import dataclasses

    from tgi.backends.cpu import backend as cpu_backend

    monkeypatch.delenv("TGI_CPU_BLOCK_KERNELS_F32", raising=False)
    native_bf16 = dataclasses.replace(cpu_info(), flags=frozenset({"avx2", "fma", "f16c", "avx512_bf16"}))
    monkeypatch.setattr(cpu_backend, "cpu_info", lambda: native_bf16)
    backend = cpu_backend.CpuBackend()
    assert backend.block_weight_types("bfloat16") == frozenset(native.BLOCK_TYPES)
    # float32 is a choice there: dense products, exactly transformers' arithmetic, no block copy read
    assert backend.block_weight_types("float32") == frozenset()
    monkeypatch.setenv("TGI_CPU_BLOCK_KERNELS_F32", "1")
    assert backend.block_weight_types("float32") == frozenset(native.BLOCK_TYPES)
    monkeypatch.delenv("TGI_CPU_BLOCK_KERNELS_F32")
    # without bfloat16 arithmetic float32 is the default, and dense float32 would read 4x the bytes
    avx2_only = dataclasses.replace(cpu_info(), flags=frozenset({"avx2", "fma", "f16c"}))
    monkeypatch.setattr(cpu_backend, "cpu_info", lambda: avx2_only)
    backend = cpu_backend.CpuBackend()
    assert backend.default_dtype() == "float32"
    assert backend.block_weight_types("float32") == frozenset(native.BLOCK_TYPES)
    # where the CPU has no AVX-512 (the dense float32 product is AVX2 too) the blocks go further: 256 rows for
    # 32-weight blocks (else 16), every row count for the K-quants on int8 inputs (else 64), which are then
    # loaded without a dense copy
    impls = native.block_impls()
    avx512 = "avx512f" in cpu_info().flags or any(i.startswith("avx512") for i in impls)
    k_rows, rows = ("up to 64 rows", 16) if avx512 else ("for every row count (no dense copy)", 256)
    on_int8 = "avx2-int8" in impls and "avx512-vnni" not in impls
    int8 = f"; K-quants on int8 inputs (avx2-int8) {k_rows}" if on_int8 else ""
    assert backend.describe_kernels("float32")["gguf block linear"] == f"float32 AVX2 up to {rows} rows{int8}"
    standalone = {"Q4_K", "Q5_K", "Q6_K"} if on_int8 and not avx512 else set()
    assert backend.standalone_block_types("float32") == standalone
    monkeypatch.setenv("TGI_CPU_BLOCK_KERNELS", "0")
    assert backend.block_weight_types("bfloat16") == backend.block_weight_types("float32") == frozenset()
