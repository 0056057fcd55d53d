"""The Triton backends' batch-invariant kernels (`--deterministic`), run on CPU tensors by triton's
interpreter (`TRITON_INTERPRET=1`, set by tests/conftest.py), bit for bit: a row's result does not depend on
how many rows share the call or where it sits — the fixed-tile dense product, RMSNorm, the quantized GEMMs
in one split, LoRA's gather kernels — and a query's attention is the same prefilled at once, in chunks,
after cached blocks, beside other sequences, or decoded; and the backend's switch and refusals. Skipped
where a GPU is visible (the kernels then run natively; no GPU has run this file yet)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

if torch.cuda.is_available():
    pytest.skip("a GPU is visible: the kernels are not interpreted", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET=1 was not set before triton was imported", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

from interpreted_cuda import InterpretedCudaBackend

from tgi.backends.cpu.kv_cache import CpuKVCache
from tgi.backends.triton_common.attention import TritonAttention
from tgi.backends.triton_common.invariance import attach_invariant_kernels
from tgi.backends.triton_common.kernels.invariant_matmul import invariant_linear
from tgi.backends.triton_common.kernels.lora import TritonLoRAOps
from tgi.backends.triton_common.kernels.rms_norm import rms_norm
from tgi.backends.triton_common.quant import quantized_linear
from tgi.core.interfaces import AttentionLayerSpec, KVCacheSpec, UnsupportedError
from tgi.core.lora.ops import LoRAWeights
from tgi.core.models.context import SeqChunk, build_attention_metadata
from tgi.core.models.layers import LayerNorm, Linear, RMSNorm
from tgi.core.models.moe import GroupedExperts
from tgi.core.quant.weights import Int8Weight

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: (first row, rows) slices compared with the whole call (70 rows: two 64-row tiles of the dense product): one
#: row, two, a 16-row call, and 66 rows from row 1 (rows 64 and 65 move from the second tile to the first);
#: the per-row kernels (RMSNorm, LoRA) run a program per row, so each row here is interpreter time
SLICES = ((5, 1), (3, 2), (7, 16), (1, 66))


def assert_rows_invariant(product, x: torch.Tensor) -> None:
    """Each row of `product(rows, first)` (x's rows from `first` on) equals the row computed in a call of
    fewer rows, at another place."""
    full = product(x, 0)
    for start, count in SLICES:
        part = product(x[start : start + count], start)
        assert torch.equal(part, full[start : start + count]), f"rows {start}..{start + count}"


def skip_unless_interpreted_dot_is_row_invariant(dtype: torch.dtype) -> None:
    """The interpreter computes `tl.dot` with numpy's matmul, so a float32 tile's row comes out bit-equal
    at any row of the tile only where this CPU's BLAS makes it so (a GPU's `tl.dot` does; OpenBLAS's
    float32 kernels on the AVX2-only AMD EPYC do not: a row moved within a [16, 96] x [96, 80] tile
    changes in its last bits). There the check could only fail on numpy, not on the kernel's fixed order."""
    if dtype != torch.float32:
        return  # the half-precision tiles' products round the same here
    import numpy as np

    a = np.random.default_rng(0).standard_normal((16, 96)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((96, 80)).astype(np.float32)
    full = a @ b
    for row in range(16):
        moved = np.zeros_like(a)
        moved[0] = a[row]
        if not np.array_equal((moved @ b)[0], full[row]):
            pytest.skip(
                "numpy's float32 matmul (the interpreter's tl.dot) depends on a row's place in a tile on this CPU"
            )


def _randn(*shape, seed: int, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("bias", [False, True])
def test_dense_product_rows_are_invariant(dtype, bias):
    dt = DTYPES[dtype]
    skip_unless_interpreted_dot_is_row_invariant(dt)
    x, w = _randn(70, 96, seed=1, dtype=dt), _randn(80, 96, seed=2, dtype=dt, scale=0.1)
    b = _randn(80, seed=3, dtype=dt) if bias else None
    assert_rows_invariant(lambda a, _: invariant_linear(a, w, b), x)
    ref = F.linear(x.float(), w.float(), None if b is None else b.float())
    tol = 1e-5 if dt == torch.float32 else 2e-2
    assert (invariant_linear(x, w, b).float() - ref).abs().max().item() <= tol * ref.abs().max().item()


def test_dense_product_refuses_mismatched_inputs():
    w = torch.zeros(8, 16)
    with pytest.raises(ValueError, match="does not fit"):
        invariant_linear(torch.zeros(3, 15), w)
    with pytest.raises(ValueError, match="dtype"):
        invariant_linear(torch.zeros(3, 16, dtype=torch.bfloat16), w)


@pytest.mark.parametrize(
    ("dtype", "hidden"),
    [("float32", 64), ("bfloat16", 64), ("float16", 64), ("float32", 5000)],  # 5000: two 4096-wide chunks
)
def test_rms_norm_rows_are_invariant_and_match_the_model(dtype, hidden):
    dt = DTYPES[dtype]
    x, r = _randn(70, hidden, seed=4, dtype=dt), _randn(70, hidden, seed=5, dtype=dt)
    norm = RMSNorm(hidden, 1e-6, dt)
    norm.weight.data = _randn(hidden, seed=6, dtype=dt)
    assert_rows_invariant(lambda a, _: rms_norm(a, None, norm.weight, norm.eps)[0], x)
    assert_rows_invariant(lambda a, i: rms_norm(a, r[i : i + a.shape[0]], norm.weight, norm.eps)[0], x)
    got, summed = rms_norm(x, r, norm.weight, norm.eps)
    want, want_sum = norm(x, r)  # the model's torch arithmetic
    if dt == torch.bfloat16:  # the interpreter truncates float32 -> bfloat16 casts (a GPU rounds): 1 ulp
        assert (summed.float() - want_sum.float()).abs().max().item() <= 2**-7 * want_sum.float().abs().max()
    else:
        assert torch.equal(summed, want_sum)
    tol = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 3e-2}[dt]  # bfloat16: 3 truncations
    assert (got.float() - want.float()).abs().max().item() <= tol * want.float().abs().max().item()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_quantized_product_in_one_split_rows_are_invariant(dtype):
    dt = DTYPES[dtype]
    skip_unless_interpreted_dot_is_row_invariant(dt)
    w = _randn(80, 320, seed=7, scale=0.1)
    scale = w.abs().amax(1) / 127
    weight = Int8Weight(weight=torch.round(w / scale[:, None]).to(torch.int8), scale=scale, rows=80, cols=320)
    kernel = quantized_linear(weight, dtype, split=1)
    assert "1 split along K" in kernel.name
    assert_rows_invariant(lambda a, _: kernel(a, None), _randn(70, 320, seed=8, dtype=dt))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lora_deltas_rows_are_invariant(dtype):
    dt = DTYPES[dtype]
    weights = LoRAWeights(
        _randn(3, 8, 96, seed=9, dtype=dt, scale=0.1), _randn(3, 80, 8, seed=10, dtype=dt, scale=0.1),
        (True, True, True),
    )  # fmt: skip
    slots = [(i * 5) % 4 - 1 for i in range(70)]  # -1 (no adapter), 0, 1, 2 mixed
    x, base = _randn(70, 96, seed=11, dtype=dt), _randn(70, 80, seed=12, dtype=dt)
    ops = TritonLoRAOps()

    def product(rows: torch.Tensor, start: int) -> torch.Tensor:
        plan = ops.plan(slots[start : start + rows.shape[0]], torch.device("cpu"))
        y = base[start : start + rows.shape[0]].clone()
        return y if plan is None else ops.apply(y, rows, weights, plan)

    assert_rows_invariant(product, x)


# -- attention ----------------------------------------------------------------------------------------------
LAYERS = {  # heads, kv heads, head dim, window, soft-cap
    "gqa": (4, 2, 16, None, None),
    "window": (4, 2, 16, 7, None),
    "softcap-d24": (6, 2, 24, None, 4.0),
}
BLOCK = 4
LENGTHS = {"a": 24, "b": 15, "c": 9, "long": 150}  # a query row is a decode program per kv head


def _setup(case: str, dtype: str):
    h, hkv, d, window, cap = LAYERS[case]
    layer = AttentionLayerSpec(h, hkv, d, d**-0.5, window, cap)
    num_blocks = sum(-(-n // BLOCK) for n in LENGTHS.values())
    cache = CpuKVCache(KVCacheSpec(1, hkv, d, BLOCK, dtype), num_blocks)
    cache.write(0, _randn(num_blocks * BLOCK, hkv, d, seed=13, scale=2), _randn(num_blocks * BLOCK, hkv, d, seed=14),
                torch.arange(num_blocks * BLOCK))  # fmt: skip
    perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(15)).tolist()
    tables, off = {}, 0
    for name, n in LENGTHS.items():
        tables[name] = perm[off : off + -(-n // BLOCK)]
        off += len(tables[name])
    queries = {
        n: _randn(length, h, d, seed=16 + i, dtype=DTYPES[dtype], scale=2)
        for i, (n, length) in enumerate(LENGTHS.items())
    }
    return layer, cache, tables, queries


def _run(attention, cache, layer, tables, queries, chunks):
    """chunks: (sequence, start, tokens, is_prefill) in step order (prefills first); the output per chunk."""
    meta = build_attention_metadata([SeqChunk(s, n, tables[q], p) for q, s, n, p in chunks], BLOCK)
    q = torch.cat([queries[name][s : s + n] for name, s, n, _ in chunks])
    tp = meta.num_prefill_tokens
    out = torch.cat([
        attention.prefill(q[:tp], None, None, cache, 0, meta, layer) if tp else q[:0],
        attention.decode(q[tp:], cache, 0, meta, layer) if meta.num_decode_tokens else q[:0],
    ])  # fmt: skip
    sizes = [n for _, _, n, _ in chunks]
    return list(out.split(sizes))


#: GQA and a window in float32, a soft-cap and a head size padded to 32 in bfloat16 (its loads, rounding and
#: stores are the same code in every case: one 16-bit case)
@pytest.mark.parametrize(
    ("case", "dtype"), [("gqa", "float32"), ("window", "float32"), ("softcap-d24", "bfloat16")]
)
def test_attention_is_the_same_however_the_query_is_batched(case, dtype):
    layer, cache, tables, queries = _setup(case, dtype)
    attention = TritonAttention(min_tokens_per_split=4, max_splits=4, batch_invariant=True)
    assert attention.num_decode_splits(1, 2, 4096, None) == 1
    run = lambda chunks: _run(attention, cache, layer, tables, queries, chunks)  # noqa: E731
    [alone] = run([("a", 0, 24, True)])
    chunked = torch.cat(run([("a", 0, 13, True)]) + run([("a", 13, 11, True)]))
    assert torch.equal(chunked, alone), "prefilled in two chunks"
    [cached] = run([("a", 16, 8, True)])
    assert torch.equal(cached, alone[16:]), "continued after cached blocks"
    beside = run([("b", 0, 15, True), ("c", 2, 7, True), ("a", 0, 24, True)])
    assert torch.equal(beside[2], alone), "beside other prefills"
    for pos in (0, 11, 23):
        [decoded] = run([("a", pos, 1, False)])
        assert torch.equal(decoded, alone[pos : pos + 1]), f"position {pos} decoded alone"
    mixed = run([("b", 0, 15, True), ("c", 8, 1, False), ("a", 23, 1, False)])
    assert torch.equal(mixed[2], alone[23:]), "decoded in a step with a prefill and another decode"
    assert torch.equal(mixed[1], run([("c", 0, 9, True)])[0][8:]), "decoded = the last prefilled position"


@pytest.mark.parametrize("batch_invariant", [False, True])
def test_decode_splits_follow_the_batch_unless_batch_invariant(batch_invariant):
    """By default the split count of a long context follows the batch size (here 4 splits alone, 1 beside
    three others), and the merged result changes in its last bits; in batch-invariant mode it does not."""
    layer, cache, tables, queries = _setup("gqa", "float32")
    attention = TritonAttention(
        min_tokens_per_split=16, max_splits=4, target_programs=8, batch_invariant=batch_invariant
    )
    run = lambda chunks: _run(attention, cache, layer, tables, queries, chunks)  # noqa: E731
    [alone] = run([("long", 149, 1, False)])
    beside = run([("a", 23, 1, False), ("b", 14, 1, False), ("c", 8, 1, False), ("long", 149, 1, False)])
    assert torch.equal(beside[3], alone) == batch_invariant


def test_split_decode_is_refused_in_batch_invariant_mode():
    layer, cache, tables, queries = _setup("gqa", "float32")
    meta = build_attention_metadata([SeqChunk(23, 1, tables["a"], False)], BLOCK)
    meta.extra["triton/num_decode_splits"] = 2
    with pytest.raises(ValueError, match="one split"):
        TritonAttention(batch_invariant=True).decode(queries["a"][23:], cache, 0, meta, layer)


# -- the backend's switch -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_backend_serves_deterministic_mode(dtype):
    backend = InterpretedCudaBackend()
    backend.use_batch_invariant_kernels(dtype)
    assert backend.batch_invariant
    assert backend.attention().batch_invariant
    assert backend.sampler().per_row
    assert (
        "1 split along K"
        in backend.quantized_linear(
            Int8Weight(weight=torch.zeros(8, 64, dtype=torch.int8), scale=torch.ones(8), rows=8, cols=64),
            dtype,
        ).name
    )


def test_backend_refuses_what_is_not_batch_invariant():
    backend = InterpretedCudaBackend()
    with pytest.raises(UnsupportedError, match="float64"):
        backend.use_batch_invariant_kernels("float64")
    assert not backend.batch_invariant
    backend.attention_name = "flash-attn"
    with pytest.raises(UnsupportedError, match="--attention triton"):
        backend.use_batch_invariant_kernels("float32")
    assert not backend.batch_invariant


class _Experts(GroupedExperts):
    """A mixture-of-experts layer with no experts (only its type matters here)."""

    def __init__(self) -> None:
        torch.nn.Module.__init__(self)


def test_model_layers_get_invariant_kernels_or_are_refused_by_name():
    model = torch.nn.ModuleDict({"proj": Linear(16, 8), "norm": RMSNorm(16, 1e-6, torch.float32)})
    assert attach_invariant_kernels(model) == {"triton invariant matmul": 1, "triton rms norm": 1}
    assert model["proj"].linear_kernel is not None and model["norm"].norm_kernel is rms_norm
    for layer, what in (
        (LayerNorm(16, 1e-5, torch.float32), "LayerNorm"),
        (torch.nn.Linear(16, 8), "takes no backend kernel"),
        (_Experts(), "mixture-of-experts"),
    ):
        bad = torch.nn.ModuleDict({"proj": Linear(16, 8), "odd": layer})
        with pytest.raises(UnsupportedError, match=what):
            attach_invariant_kernels(bad)
        assert bad["proj"].linear_kernel is None, "nothing attached before the refusal"
