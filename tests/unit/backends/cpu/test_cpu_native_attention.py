"""The native C++ paged decode kernel ("cpu-native") against a dense float64 reference computed per
sequence from its keys/values, and against the SDPA reference decode ("cpu-sdpa"), over random scattered
block tables, ragged lengths (1 included), GQA ratios, head sizes, block sizes, windows and soft-caps."""

from __future__ import annotations

import math

import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

from tgi.backends.cpu import native
from tgi.backends.cpu.attention import CpuAttention, CpuNativeAttention
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.backends.cpu.kv_cache import CpuKVCache
from tgi.backends.cpu.native import loader
from tgi.core.interfaces import AttentionLayerSpec, UnsupportedError
from tgi.core.interfaces.types import KVCacheSpec
from tgi.core.models.context import SeqChunk, build_attention_metadata
from tgi.core.torch.testing.reference import AttentionCase, run_attention_schedule


def dense_decode(q, k, v, layer: AttentionLayerSpec) -> torch.Tensor:
    """The last query of a sequence: q [H, Dh], k/v [L, Hkv, Dh] -> [H, Dh] float64."""
    g = q.shape[0] // k.shape[1]
    if layer.sliding_window is not None:
        k, v = k[-layer.sliding_window :], v[-layer.sliding_window :]
    kd, vd = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    scores = torch.einsum("hd,khd->hk", q.double(), kd) * layer.scale
    if layer.softcap is not None:
        scores = torch.tanh(scores / layer.softcap) * layer.softcap
    return torch.einsum("hk,khd->hd", torch.softmax(scores, -1), vd)


def make_decode_batch(layer, block_size, dtype, lengths, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h, hkv, d = layer.num_heads, layer.num_kv_heads, layer.head_dim
    need = [math.ceil(n / block_size) for n in lengths]
    perm = torch.randperm(sum(need) + 5, generator=gen).tolist()  # scattered, non-contiguous blocks
    cache = CpuKVCache(KVCacheSpec(1, hkv, d, block_size, str(dtype).removeprefix("torch.")), len(perm))
    key_cache, value_cache = cache.layer(0)
    # garbage everywhere: slots past a sequence's length must not be read
    key_cache.copy_(torch.randn(key_cache.shape, generator=gen) * 1e3)
    value_cache.copy_(torch.randn(value_cache.shape, generator=gen) * 1e3)
    chunks, ks, vs, off = [], [], [], 0
    for n, nb in zip(lengths, need, strict=True):
        table = perm[off : off + nb]
        off += nb
        k = (torch.randn(n, hkv, d, generator=gen) * 2).to(dtype)
        v = torch.randn(n, hkv, d, generator=gen).to(dtype)
        slots = torch.tensor([table[i // block_size] * block_size + i % block_size for i in range(n)])
        key_cache.view(-1, hkv, d)[slots] = k
        value_cache.view(-1, hkv, d)[slots] = v
        ks.append(k)
        vs.append(v)
        chunks.append(SeqChunk(n - 1, 1, table, False))
    meta = build_attention_metadata(chunks, block_size)
    q = (torch.randn(len(lengths), h, d, generator=gen) * 2).to(dtype)
    return q, cache, meta, ks, vs


LENGTHS = [1, 2, 17, 5, 64, 33, 1, 100, 16]


MHA, GQA3, GQA4 = (4, 4), (6, 2), (8, 2)
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}
# one case per code path of the vector decode, each dtype: every head size the AVX-512 / AVX2 paths have a
# variant for (32, 64, 80, 96, 128, 256) and 48 (none: the plain loops); query-head groups of 1, 3, 4 and
# block sizes 1, 4, 16 (8-key groups spanning 8, 2 or no block boundaries) spread over them. bfloat16 keeps
# off the AMX shapes here (block size 16 only at head sizes 80 and 256): the AMX path has its own tests below.
DENSE_CASES = [
    (torch.float32, MHA, 32, 1),
    (torch.float32, GQA3, 64, 4),
    (torch.float32, GQA4, 80, 16),
    (torch.float32, MHA, 48, 4),
    (torch.float32, GQA3, 96, 16),
    (torch.float32, GQA4, 128, 1),
    (torch.float32, GQA3, 256, 16),
    (torch.bfloat16, GQA4, 32, 1),
    (torch.bfloat16, MHA, 64, 4),
    (torch.bfloat16, GQA3, 80, 16),
    (torch.bfloat16, GQA4, 48, 1),
    (torch.bfloat16, MHA, 96, 4),
    (torch.bfloat16, GQA3, 128, 1),
    (torch.bfloat16, GQA4, 256, 16),
]


@pytest.mark.parametrize(
    ("dtype", "heads", "head_dim", "block_size"),
    DENSE_CASES,
    ids=[f"{str(d)[6:]}-{h[0]}x{h[1]}-d{dh}-b{b}" for d, h, dh, b in DENSE_CASES],
)
def test_native_decode_matches_dense(dtype, heads, head_dim, block_size):
    tol = TOL[dtype]
    layer = AttentionLayerSpec(heads[0], heads[1], head_dim, head_dim**-0.5)
    q, cache, meta, ks, vs = make_decode_batch(layer, block_size, dtype, LENGTHS)
    attn = CpuNativeAttention()
    attn.check(layer, block_size, str(dtype).removeprefix("torch."))
    out = attn.decode(q, cache, 0, meta, layer)
    assert out.shape == q.shape and out.dtype == dtype
    expected = torch.stack([dense_decode(q[i], ks[i], vs[i], layer) for i in range(len(LENGTHS))])
    # bf16: the output itself is rounded to bf16 (relative 2^-8 of values up to ~3)
    assert (out.double() - expected).abs().max().item() < tol
    ref = CpuAttention().decode(q, cache, 0, meta, layer)
    assert (out.double() - ref.double()).abs().max().item() < tol


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["f32", "bf16"])
# block sizes 1, 4, 16 spread over the windows (bfloat16 at 16: the AMX path, taken by default here)
@pytest.mark.parametrize(
    "window,softcap,block_size", [(1, None, 1), (6, None, 4), (40, None, 16), (None, 3.0, 1), (5, 3.0, 16)]
)
def test_native_decode_window_and_softcap(dtype, tol, window, softcap, block_size):
    layer = AttentionLayerSpec(6, 2, 64, 64**-0.5, sliding_window=window, softcap=softcap)
    q, cache, meta, ks, vs = make_decode_batch(layer, block_size, dtype, LENGTHS, seed=1)
    out = CpuNativeAttention().decode(q, cache, 0, meta, layer)
    expected = torch.stack([dense_decode(q[i], ks[i], vs[i], layer) for i in range(len(LENGTHS))])
    assert (out.double() - expected).abs().max().item() < tol


@pytest.mark.parametrize(
    "case",
    [
        AttentionCase(8, 2, 64, 4),
        AttentionCase(9, 3, 64, 16),
        AttentionCase(6, 2, 32, 1, sliding_window=5, softcap=3.0),
    ],
    ids=["gqa4", "smollm", "window+softcap"],
)
@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("bfloat16", 5e-2)])
def test_native_through_mixed_schedule(case, dtype, tol):
    # prefill chunks and decodes mixed over steps, as the engine runs them
    from tgi.backends.cpu.backend import CpuBackend

    backend = CpuBackend()
    backend.select_attention("cpu-native")
    assert run_attention_schedule(backend, case, dtype) < tol


def test_kernel_rejects_bad_inputs():
    k = torch.zeros(2, 4, 1, 32)
    q = torch.zeros(1, 2, 32)
    with pytest.raises(RuntimeError, match="share a dtype"):
        native.paged_decode(
            q.bfloat16(), k, k, torch.zeros(1, 2, dtype=torch.int32), torch.ones(1, dtype=torch.int32), 1.0
        )
    with pytest.raises(RuntimeError, match="exceeds the block table"):
        native.paged_decode(
            q, k, k, torch.zeros(1, 2, dtype=torch.int32), torch.tensor([9], dtype=torch.int32), 1.0
        )


def test_backend_lists_both_and_builds_native_or_says_why(monkeypatch):
    from tgi.backends.cpu import backend as cpu_backend

    b = cpu_backend.CpuBackend()
    assert b.attention_names() == ("cpu-native", "cpu-sdpa")
    assert b.attention().name == "cpu-native"  # these machines have g++
    b.select_attention("cpu-sdpa")
    assert b.attention().name == "cpu-sdpa" and type(b.attention()) is CpuAttention
    b.select_attention("cpu-native")
    assert b.attention().name == "cpu-native"

    # a failed build is reported with its reason and the way out, never replaced by the reference
    monkeypatch.setattr(loader, "_module", None)
    monkeypatch.setattr(loader, "_error", native.NativeBuildError("g++: command not found"))
    with pytest.raises(UnsupportedError, match=r"g\+\+: command not found.*--attention cpu-sdpa"):
        cpu_backend.CpuBackend().select_attention("cpu-native")
    fresh = cpu_backend.CpuBackend()
    with pytest.raises(UnsupportedError, match="cpu-native"):
        fresh.attention()


def test_without_a_compiler_the_default_is_the_reference_and_says_why(monkeypatch, caplog):
    from tgi.backends.cpu import backend as cpu_backend

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(loader.shutil, "which", lambda name: None)
    with caplog.at_level("WARNING"):
        assert cpu_backend.default_attention() == "cpu-sdpa"
    assert "no C++ compiler found" in caplog.text


# ---- the AMX decode path (bfloat16; head sizes 32-128, block sizes of 16s, at most 16 query heads per kv head)
# from /proc/cpuinfo, not from the kernels' probe: on a CPU with AMX, a kernel that cannot use it fails
AMX = {"amx_tile", "amx_bf16", "avx512_bf16"} <= cpu_info().flags
LONG_LENGTHS = [1, 2, 15, 16, 17, 31, 32, 33, 100, 300]


def _decode(q, cache, meta, layer, impl):
    attn = CpuNativeAttention()
    attn.decode_impl = impl
    return attn.decode(q, cache, 0, meta, layer)


@pytest.mark.skipif(not AMX, reason=f"{MISSING_CPU_FEATURE}: amx_tile, amx_bf16")
# every head size the AMX path has a variant for (1 to 4 tiles of 32), groups of 1, 3 and 16 query heads, and
# blocks of 16 and 32 spread over them
@pytest.mark.parametrize(
    "heads,head_dim,block_size", [((4, 4), 32, 16), ((9, 3), 64, 32), ((16, 1), 96, 16), ((9, 3), 128, 16),
                                  ((16, 1), 128, 32)],
    ids=["mha-d32-b16", "smollm-d64-b32", "g16-d96-b16", "smollm-d128-b16", "g16-d128-b32"],
)  # fmt: skip
def test_amx_decode_matches_dense(heads, head_dim, block_size):
    layer = AttentionLayerSpec(heads[0], heads[1], head_dim, head_dim**-0.5)
    q, cache, meta, ks, vs = make_decode_batch(layer, block_size, torch.bfloat16, LONG_LENGTHS, seed=2)
    out = _decode(q, cache, meta, layer, "amx")
    expected = torch.stack([dense_decode(q[i], ks[i], vs[i], layer) for i in range(len(LONG_LENGTHS))])
    # the output is rounded to bfloat16 (relative 2^-8 of values up to ~3), as on the vector path
    assert (out.double() - expected).abs().max().item() < 2e-2
    vector = _decode(q, cache, meta, layer, "vector")
    assert (out.double() - vector.double()).abs().max().item() < 2e-2


@pytest.mark.skipif(not AMX, reason=f"{MISSING_CPU_FEATURE}: amx_tile, amx_bf16")
@pytest.mark.parametrize("window,softcap", [(1, None), (6, None), (40, None), (None, 3.0), (21, 3.0)])
def test_amx_decode_window_and_softcap(window, softcap):
    layer = AttentionLayerSpec(6, 2, 64, 64**-0.5, sliding_window=window, softcap=softcap)
    q, cache, meta, ks, vs = make_decode_batch(layer, 16, torch.bfloat16, LONG_LENGTHS, seed=3)
    out = _decode(q, cache, meta, layer, "amx")
    expected = torch.stack([dense_decode(q[i], ks[i], vs[i], layer) for i in range(len(LONG_LENGTHS))])
    assert (out.double() - expected).abs().max().item() < 2e-2


@pytest.mark.parametrize(
    "impl",
    [
        "vector",
        pytest.param(
            "amx", marks=pytest.mark.skipif(not AMX, reason=f"{MISSING_CPU_FEATURE}: amx_tile, amx_bf16")
        ),
    ],
)
def test_decode_never_reads_unused_slots(impl):
    # NaN in every slot no sequence owns (the tail of each last block included): a kernel that multiplies
    # them by a zero probability would return NaN
    layer = AttentionLayerSpec(9, 3, 64, 0.125)
    q, cache, meta, ks, vs = make_decode_batch(layer, 16, torch.bfloat16, LONG_LENGTHS, seed=4)
    key_cache, value_cache = cache.layer(0)
    owned = torch.zeros(key_cache.shape[0] * 16, dtype=torch.bool)
    for i, n in enumerate(LONG_LENGTHS):
        table = meta.decode_block_tables[i].tolist()
        owned[[table[t // 16] * 16 + t % 16 for t in range(n)]] = True
    key_cache.view(-1, 3, 64)[~owned] = float("nan")
    value_cache.view(-1, 3, 64)[~owned] = float("nan")
    out = _decode(q, cache, meta, layer, impl)
    assert not out.isnan().any()
    expected = torch.stack([dense_decode(q[i], ks[i], vs[i], layer) for i in range(len(LONG_LENGTHS))])
    assert (out.double() - expected).abs().max().item() < 2e-2


@pytest.mark.skipif(not AMX, reason=f"{MISSING_CPU_FEATURE}: amx_tile, amx_bf16")
def test_amx_decode_refuses_what_it_cannot_run():
    layer = AttentionLayerSpec(4, 2, 80, 80**-0.5)
    q, cache, meta, _, _ = make_decode_batch(layer, 16, torch.bfloat16, [5, 20])
    with pytest.raises(RuntimeError, match="head size of 32, 64, 96 or 128"):
        _decode(q, cache, meta, layer, "amx")
    layer = AttentionLayerSpec(4, 2, 64, 0.125)
    q, cache, meta, _, _ = make_decode_batch(layer, 4, torch.bfloat16, [5, 20])
    with pytest.raises(RuntimeError, match="block size"):
        _decode(q, cache, meta, layer, "amx")
    q, cache, meta, _, _ = make_decode_batch(layer, 16, torch.float32, [5, 20])
    with pytest.raises(RuntimeError, match="needs bfloat16"):
        _decode(q, cache, meta, layer, "amx")
