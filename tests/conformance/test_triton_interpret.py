"""The CUDA/ROCm Triton kernels, run on CPU tensors by triton's interpreter (`TRITON_INTERPRET=1`).

Part 1 compares each kernel with the CPU backend (its KV write and its SDPA attention) on the same paged
cache: the KV write, split-K decode (1 to 8 splits, GQA, window, soft-cap) and chunked prefill. Part 2
runs the whole backend conformance suite on `CudaBackend` with its device swapped for the CPU, so the
Triton attention, the Triton KV cache and `TritonModelRunner` go through the same checks as every backend,
including the end-to-end generation against `transformers`.

`TRITON_INTERPRET` is read when triton is imported (its own `tl.cdiv` & co. are decorated then), when a
kernel is decorated, and at launch, so `conftest.py` here sets it before anything imports triton, and it
stays set for the session. On a machine with a GPU it is not set and this module is skipped (the CUDA
conformance suite runs the kernels natively there), so it never turns a GPU session's kernels into
interpreted ones.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys

import pytest
import torch

if torch.cuda.is_available():
    pytest.skip(
        "a GPU is visible: the kernels run natively in test_cuda_conformance.py", allow_module_level=True
    )
if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
    raise RuntimeError(
        "triton was imported before TRITON_INTERPRET=1 was set (tests/conftest.py sets it): "
        "run with TRITON_INTERPRET=1 in the environment"
    )
os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")
_KERNEL_MODULES = ("common", "kv_quant", "reshape_and_cache", "decode", "prefill")
if "tgi.backends.triton_common.kernels.decode" in sys.modules:  # imported earlier without the interpreter
    for name in _KERNEL_MODULES:
        importlib.reload(sys.modules[f"tgi.backends.triton_common.kernels.{name}"])
    importlib.reload(sys.modules["tgi.backends.triton_common.kernels"])

from interpreted_cuda import InterpretedCudaBackend  # noqa: E402

from tgi.backends.cpu.attention import CpuAttention  # noqa: E402
from tgi.backends.cpu.kv_cache import CpuKVCache  # noqa: E402
from tgi.backends.triton_common import kernels as tk  # noqa: E402
from tgi.backends.triton_common.attention import TritonAttention  # noqa: E402
from tgi.core.interfaces import AttentionLayerSpec, KVCacheSpec  # noqa: E402
from tgi.core.models.context import SeqChunk, build_attention_metadata  # noqa: E402
from tgi.core.torch.testing import TorchBackendConformance  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# max abs error of the Triton output against the CPU backend's, which itself rounds to the dtype
TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3.2e-2}


def test_kernels_are_interpreted():
    assert type(tk.decode._decode_split_kernel).__name__ == "InterpretedFunction"


def _filled_cache(dtype, hkv, d, bs, num_blocks, seed):
    gen = torch.Generator().manual_seed(seed)
    cache = CpuKVCache(KVCacheSpec(1, hkv, d, bs, dtype), num_blocks)
    n = num_blocks * bs
    k = torch.randn(n, hkv, d, generator=gen) * 2
    v = torch.randn(n, hkv, d, generator=gen)
    cache.write(0, k, v, torch.arange(n))
    return cache


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_reshape_and_cache_matches_cpu_write(dtype):
    gen = torch.Generator().manual_seed(0)
    ref = _filled_cache(dtype, 3, 24, 4, 6, seed=1)  # odd head count and head size: padded in the kernel
    kc, vc = (t.clone() for t in ref.layer(0))
    key = torch.randn(70, 3, 24, generator=gen).to(DTYPES[dtype])
    value = torch.randn(70, 3, 24, generator=gen).to(DTYPES[dtype])
    slots = torch.randperm(24, generator=gen)[:17].repeat(5)[:70]  # >64 tokens: several programs
    slots[torch.arange(17, 70)] = -1  # negative: skipped (the first 17 are distinct slots)
    slots[[3, 9]] = -1
    tk.reshape_and_cache(key, value, kc, vc, slots)
    ref.write(0, key, value, slots)
    assert torch.equal(kc, ref.layer(0)[0]) and torch.equal(vc, ref.layer(0)[1])


DECODE = {  # heads, kv heads, head dim, block size, window, softcap, splits
    "gqa4-1split": (8, 2, 32, 4, None, None, 1),
    "gqa4-3splits": (8, 2, 32, 4, None, None, 3),
    "mha-8splits-bs1": (2, 2, 16, 1, None, None, 8),
    "mqa-d80-window": (4, 1, 80, 8, 13, None, 4),
    "gqa3-softcap-window": (6, 2, 32, 16, 20, 2.5, 2),
}


#: every case in float32 (the tightest tolerance); each 16-bit dtype on two cases (its loads, stores and
#: accumulation are the same code in every case: one case per feature and dtype is a sweep)
DECODE_DTYPES = [
    *((c, "float32") for c in DECODE),
    ("gqa4-3splits", "bfloat16"), ("gqa3-softcap-window", "bfloat16"),
    ("mha-8splits-bs1", "float16"), ("mqa-d80-window", "float16"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "dtype"), DECODE_DTYPES)
def test_split_k_decode_matches_cpu(case, dtype):
    h, hkv, d, bs, window, cap, splits = DECODE[case]
    layer = AttentionLayerSpec(h, hkv, d, d**-0.5, window, cap)
    gen = torch.Generator().manual_seed(2)
    lens = [1, 37, 70]
    num_blocks = sum(-(-n // bs) for n in lens) + 2
    cache = _filled_cache(dtype, hkv, d, bs, num_blocks, seed=3)
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables, off = [], 0
    for n in lens:
        tables.append(perm[off : off + -(-n // bs)])
        off += -(-n // bs)
    meta = build_attention_metadata(
        [SeqChunk(n - 1, 1, t, False) for n, t in zip(lens, tables, strict=True)], bs
    )
    q = (torch.randn(len(lens), h, d, generator=gen) * 2).to(DTYPES[dtype])
    expected = CpuAttention().decode(q, cache, 0, meta, layer) if dtype != "float16" else None
    if expected is None:  # the CPU backend computes float16 through float32
        expected = CpuAttention().decode(q.float(), _as_float32(cache), 0, meta, layer)
    kc, vc = cache.layer(0)
    out = tk.paged_decode_attention(
        q, kc, vc, meta.decode_block_tables, meta.decode_seq_lens, layer.scale, num_splits=splits,
        sliding_window=window, softcap=cap, block_n=16,
    )  # fmt: skip
    err = (out.double() - expected.double()).abs().max().item()
    print(f"decode {case} {dtype}: max abs error {err:.2e}")
    assert err <= TOL[dtype]


def _as_float32(cache):
    spec = cache.spec
    out = CpuKVCache(
        KVCacheSpec(1, spec.num_kv_heads, spec.head_dim, spec.block_size, "float32"), cache.num_blocks
    )
    out.key_caches[0].copy_(cache.key_caches[0])
    out.value_caches[0].copy_(cache.value_caches[0])
    return out


PREFILL = {  # heads, kv heads, head dim, block size, window, softcap; chunks: (cached tokens, chunk length)
    "gqa4-bs4": (8, 2, 32, 4, None, None),
    "mha-bs1-window": (2, 2, 16, 1, 7, None),
    "gqa3-d80-softcap": (6, 2, 80, 16, None, 4.0),
}
CHUNKS = [(0, 21), (30, 9), (5, 1), (64, 40)]


PREFILL_DTYPES = [
    *((c, "float32") for c in PREFILL),
    ("gqa3-d80-softcap", "bfloat16"),
    ("mha-bs1-window", "float16"),
]  # as DECODE_DTYPES


@pytest.mark.parametrize(("case", "dtype"), PREFILL_DTYPES)
def test_chunked_prefill_matches_cpu(case, dtype):
    h, hkv, d, bs, window, cap = PREFILL[case]
    layer = AttentionLayerSpec(h, hkv, d, d**-0.5, window, cap)
    gen = torch.Generator().manual_seed(4)
    lens = [a + n for a, n in CHUNKS]
    num_blocks = sum(-(-n // bs) for n in lens) + 1
    cache = _filled_cache(dtype, hkv, d, bs, num_blocks, seed=5)  # the chunk's own keys are in the cache
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    tables, off = [], 0
    for n in lens:
        tables.append(perm[off : off + -(-n // bs)])
        off += -(-n // bs)
    meta = build_attention_metadata([SeqChunk(a, n, t) for (a, n), t in zip(CHUNKS, tables, strict=True)], bs)
    t = meta.num_prefill_tokens
    q = (torch.randn(t, h, d, generator=gen) * 2).to(DTYPES[dtype])
    kc, vc = cache.layer(0)
    # the chunks' own keys/values (the CPU backend reads them from k/v for chunks without cached context)
    k, v = kc.view(-1, hkv, d)[meta.slot_mapping], vc.view(-1, hkv, d)[meta.slot_mapping]
    if dtype == "float16":
        expected = CpuAttention().prefill(q.float(), k.float(), v.float(), _as_float32(cache), 0, meta, layer)
    else:
        expected = CpuAttention().prefill(q, k, v, cache, 0, meta, layer)
    out = tk.paged_prefill_attention(
        q, kc, vc, meta.prefill_block_tables, meta.query_start_loc, meta.prefill_seq_lens, meta.max_query_len,
        layer.scale, window, cap, block_rows=32, block_n=16,
    )  # fmt: skip
    err = (out.double() - expected.double()).abs().max().item()
    print(f"prefill {case} {dtype}: max abs error {err:.2e}")
    assert err <= TOL[dtype]


#: the engine settings whose warm-up already ran in this process (see `SplitKCudaBackend`)
_WARMED_UP: set[str] = set()
#: settings that change no kernel launch of a warm-up: engines that differ only in them warm up alike
_SAME_WARM_UP = (
    "max_total_tokens", "max_input_tokens", "max_batch_total_tokens", "prefix_caching", "async_scheduling"
)  # fmt: skip


class SplitKCudaBackend(InterpretedCudaBackend):
    """The interpreted CUDA backend with small split sizes, so that the suite's contexts exercise split-K
    decode. Its runners warm up once per engine setting in the process: a warm-up compiles every kernel
    variant a step may launch, which the interpreter does not do (nothing is compiled), so a second engine
    of the same settings would launch the same variants again for nothing (a 32-token prefill and three
    decodes, seconds each in the interpreter). The first engine of each setting (dtype, KV dtype,
    `--deterministic`, adapters, pooling, step and cache sizes) runs its warm-up whole;
    tests/conformance/test_triton_kernel_variants.py checks what a warm-up launches."""

    def __init__(self) -> None:
        super().__init__()
        self._attention = TritonAttention(min_tokens_per_split=16, max_splits=4)

    def create_rank_runner(self, source, config, collective):
        runner = super().create_rank_runner(source, config, collective)
        warmup = runner.warmup

        def once_per_setting(max_batch_tokens: int, max_num_seqs: int) -> None:
            config = runner.config
            setting = [(f.name, getattr(config, f.name)) for f in dataclasses.fields(config)]
            prefill = min(max_batch_tokens, runner.kv_cache.num_blocks * config.block_size)  # its length
            key = repr(([s for s in setting if s[0] not in _SAME_WARM_UP], prefill, max_num_seqs))
            if key not in _WARMED_UP:
                warmup(max_batch_tokens, max_num_seqs)
                _WARMED_UP.add(key)

        runner.warmup = once_per_setting
        return runner


class TestTritonInterpretedConformance(TorchBackendConformance):
    dtypes = ("float32", "bfloat16")  # float16 is covered kernel by kernel above (interpreter time)
    max_new_tokens = 5  # a step takes a second in the interpreter: 5 decodes, each check's paths still run
    # (with 4, the preemption check's three requests fit the 64-token cache in turn: nothing is preempted)
    # the deterministic check's target beside 2 others (7 and 19 tokens: its 45-token prefill cut after 6
    # tokens instead of 32, decoded in a batch of 4) instead of 7: each prompt token is a decode-kernel row
    # there; tests/conformance/test_triton_deterministic_engine.py runs the same in bfloat16
    deterministic_crowd = 2

    def make_backend(self):
        return SplitKCudaBackend()
