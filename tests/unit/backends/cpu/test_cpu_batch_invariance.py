"""The CPU backend's batch-invariant kernels (`--deterministic`), bit for bit: a row's result does not depend
on how many rows share the call, where it sits, or the thread count — the GGUF block linear on each
implementation (one for every row count), dense linears one row at a time, prefill attention as one decode
row per query (however the prompt is chunked, whatever shares the step), the sampler row by row; and the
backend's refusals."""

from __future__ import annotations

import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE
from test_cpu_block_linear import random_blocks
from test_cpu_block_linear_kquants import k_blocks

from tgi.backends.cpu import native
from tgi.backends.cpu.attention import CpuNativeAttention
from tgi.backends.cpu.backend import CpuBackend
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.backends.cpu.kv_cache import CpuKVCache
from tgi.backends.cpu.linear import RowAtATimeLinear, invariant_block_impl
from tgi.core.interfaces import AttentionLayerSpec, UnsupportedError
from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.interfaces.types import KVCacheSpec
from tgi.core.models.context import SeqChunk, build_attention_metadata
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import SamplingParams

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)

#: the /proc/cpuinfo flag each forced implementation needs
NEEDS = {"avx512-bf16": "avx512_bf16", "amx": "amx_bf16", "auto": "avx2"}


def require(impl: str) -> None:
    flag = NEEDS.get(impl)
    if flag and flag not in cpu_info().flags:
        pytest.skip(f"{MISSING_CPU_FEATURE}: {flag}")


def blocks(qtype: str, rows: int, cols: int, seed: int):
    """Valid random blocks of `qtype` (the block linear tests' makers)."""
    if qtype.endswith("_K"):
        return k_blocks(qtype, rows, cols, seed)
    return random_blocks(qtype, rows, cols, seed)


def assert_rows_invariant(product, x: torch.Tensor) -> None:
    """Each row of `product(x)` equals the row computed alone, at another place and with one thread."""
    full = product(x)
    for start, count in ((0, 1), (5, 1), (0, 2), (3, 2), (7, 16), (1, 33), (2, 48), (0, x.shape[0] - 1)):
        part = product(x[start : start + count])
        assert torch.equal(part, full[start : start + count]), f"rows {start}..{start + count}"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch.equal(product(x), full), "one thread"
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(
    "qtype,impl",
    [
        ("Q4_1", "amx"), ("Q8_0", "amx"), ("Q4_0", "amx"),
        ("Q4_1", "avx512-bf16"), ("Q8_0", "avx512-bf16"), ("Q5_0", "avx512-bf16"), ("Q4_K", "avx512-bf16"),
        ("Q6_K", "avx512-bf16"), ("Q4_1", "reference"),
    ],
)  # fmt: skip
def test_bfloat16_block_linear_rows_are_invariant(qtype, impl):
    require(impl)
    rows, cols = 48, 512
    block = blocks(qtype, rows, cols, seed=3)
    packed = native.block_pack(block.data, qtype, rows, cols)
    x = torch.randn(70, cols, generator=torch.Generator().manual_seed(1)).bfloat16()
    assert_rows_invariant(lambda a: native.block_linear(a, packed, qtype, rows, cols, None, impl=impl), x)


@pytest.mark.parametrize("impl", ["auto", "reference"])
@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0", "Q4_K"])
def test_float32_block_linear_rows_are_invariant(qtype, impl):
    require(impl)
    rows, cols = 40, 512
    block = blocks(qtype, rows, cols, seed=4)
    packed = native.block_pack(block.data, qtype, rows, cols)
    x = torch.randn(70, cols, generator=torch.Generator().manual_seed(2))
    assert_rows_invariant(lambda a: native.block_linear(a, packed, qtype, rows, cols, None, impl=impl), x)


def test_one_implementation_for_every_row_count(monkeypatch):
    monkeypatch.delenv("TGI_CPU_BLOCK_IMPL", raising=False)
    impls = native.block_impls()
    q4 = invariant_block_impl("Q4_1", "bfloat16")
    assert q4 == ("amx" if "amx" in impls else "avx512-bf16" if "avx512-bf16" in impls else "reference")
    assert invariant_block_impl("Q4_K", "bfloat16") in ("avx512-bf16", "reference")
    assert invariant_block_impl("Q4_1", "float32") == "auto"
    monkeypatch.setenv("TGI_CPU_BLOCK_IMPL", "reference")
    assert invariant_block_impl("Q4_1", "bfloat16") == "reference"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_dense_linear_one_row_at_a_time_is_invariant(dtype):
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(96, 64, generator=gen).to(dtype), torch.randn(96, generator=gen).to(dtype)
    kernel = RowAtATimeLinear(weight)
    x = torch.randn(70, 64, generator=gen).to(dtype)
    assert_rows_invariant(lambda a: kernel(a, bias), x)
    assert torch.allclose(
        kernel(x, bias).float(), torch.nn.functional.linear(x, weight, bias).float(), atol=0.1
    )


@pytest.mark.parametrize("fn", ["rms_norm", "silu_mul"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fused_ops_rows_are_invariant(fn, dtype):
    ops = native.fused()
    gen = torch.Generator().manual_seed(0)
    if fn == "rms_norm":
        weight, residual = torch.randn(576, generator=gen).to(dtype), torch.randn(70, 576, generator=gen)
        x = torch.randn(70, 576, generator=gen).to(dtype)
        residual = residual.to(dtype)

        def product(a):
            rows = a.shape[0]
            start = next(i for i in range(70) if torch.equal(x[i : i + rows], a))
            out, res = ops.rms_norm(a.contiguous(), residual[start : start + rows].contiguous(), weight, 1e-5)
            return torch.cat([out, res], dim=1)
    else:
        x = torch.randn(70, 2 * 1536, generator=gen).to(dtype)

        def product(a):
            return ops.silu_mul(a.contiguous())

    assert_rows_invariant(product, x)


# -- prefill attention as decode rows -----------------------------------------------------------------------
def _sequence_cache(dtype, hkv, dh, block_size, n, seed):
    gen = torch.Generator().manual_seed(seed)
    blocks = -(-n // block_size)
    perm = torch.randperm(2 * blocks + 3, generator=gen).tolist()
    cache = CpuKVCache(KVCacheSpec(1, hkv, dh, block_size, str(dtype).removeprefix("torch.")), len(perm))
    k_cache, v_cache = cache.layer(0)
    k_cache.copy_(torch.randn(k_cache.shape, generator=gen))
    v_cache.copy_(torch.randn(v_cache.shape, generator=gen))
    return cache, perm[:blocks], perm[blocks : 2 * blocks]


@pytest.mark.parametrize(
    "dtype,impl", [(torch.bfloat16, "amx"), (torch.bfloat16, "vector"), (torch.float32, "vector")]
)
def test_prefill_queries_are_decode_rows_however_chunked(dtype, impl):
    if impl == "amx":
        require("amx")
    layer = AttentionLayerSpec(9, 3, 64, 64**-0.5)
    bs, n = 16, 45
    cache, table, other = _sequence_cache(dtype, 3, 64, bs, n, seed=1)
    attn = CpuNativeAttention(batch_invariant=True)
    attn.decode_impl = impl
    q = torch.randn(n, 9, 64, generator=torch.Generator().manual_seed(2)).to(dtype)
    kv = torch.empty(0)  # the chunk's keys/values are read from the cache

    def prefill(chunks: list[SeqChunk], queries: torch.Tensor) -> torch.Tensor:
        return attn.prefill(queries, kv, kv, cache, 0, build_attention_metadata(chunks, bs), layer)

    whole = prefill([SeqChunk(0, n, table)], q)
    # each query as a decode row of its own
    for i in (0, 16, 44):
        one = attn.decode(
            q[i : i + 1], cache, 0, build_attention_metadata([SeqChunk(i, 1, table, False)], bs), layer
        )
        assert torch.equal(whole[i], one[0])
    # chunked in two steps, and beside another sequence's chunk in the second
    first = prefill([SeqChunk(0, 20, table)], q[:20])
    second = prefill([SeqChunk(0, 30, other), SeqChunk(20, 25, table)], torch.cat([q[:30], q[20:]]))
    assert torch.equal(torch.cat([first, second[30:]]), whole)


# -- the sampler ----------------------------------------------------------------------------------------------
def _row(i: int, params: SamplingParams) -> ScheduledSequence:
    return ScheduledSequence(f"r{i}", [1], 3, [0], False, True, params, 3, 1, [1, 2, 3])


def test_per_row_sampler_gives_each_row_what_it_gets_alone():
    gen = torch.Generator().manual_seed(0)
    params = [
        SamplingParams(do_sample=True, seed=7, temperature=0.9, top_k=40, top_p=0.9),
        SamplingParams(),
        SamplingParams(do_sample=True, seed=1, top_k=3, top_n_tokens=2),
        SamplingParams(do_sample=True, seed=2, top_p=0.5, repetition_penalty=1.3),
    ]
    rows = [_row(i, p) for i, p in enumerate(params)]
    logits = torch.randn(len(rows), 49152, generator=gen).bfloat16()
    sampler = TorchSampler(greedy_kernel=native.fused().greedy_pick, per_row=True)
    batch = sampler.sample(logits, rows)
    for i, row in enumerate(rows):
        alone = sampler.sample(logits[i : i + 1], [row])
        assert torch.equal(batch.token_ids[i : i + 1], alone.token_ids)
        assert torch.equal(batch.logprobs[i : i + 1], alone.logprobs)
    assert batch.top_token_ids.shape == (4, 2)
    assert torch.equal(batch.top_token_ids[2], sampler.sample(logits[2:3], [rows[2]]).top_token_ids[0])


# -- the backend's switch ---------------------------------------------------------------------------------------
def test_the_backend_refuses_what_is_not_batch_invariant(monkeypatch):
    backend = CpuBackend()
    backend.select_attention("cpu-sdpa")
    with pytest.raises(UnsupportedError, match=r"cpu-sdpa.*--attention cpu-native"):
        backend.use_batch_invariant_kernels("bfloat16")
    monkeypatch.setenv("TGI_CPU_FUSED", "0")
    backend.select_attention("cpu-native")
    with pytest.raises(UnsupportedError, match="TGI_CPU_FUSED=0"):
        backend.use_batch_invariant_kernels("bfloat16")
    monkeypatch.delenv("TGI_CPU_FUSED")
    backend.use_batch_invariant_kernels("bfloat16")
    assert backend.batch_invariant and backend.attention().batch_invariant
    assert backend.step_threads(8) == backend.step_threads(4096)
    backend.serve_beside_event_loop()  # the thread chooser stays off
    assert backend._chooser is None
    assert backend.sampler().per_row
    assert backend.blocks_for("float32")  # float32 computes with the GGUF blocks too
    with pytest.raises(UnsupportedError, match="LoRA adapters with --deterministic"):
        backend.lora_ops()
