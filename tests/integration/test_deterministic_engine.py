"""`--deterministic` on the real default model (SmolLM2-135M-Instruct, GGUF) through `LLMEngine`: one greedy
and one seeded sampled request give the same token ids alone, beside 1 and 31 other requests of mixed
lengths (their prefills chunked by a 128-token step budget; as the others finish, the decode batches run every
size from 33 rows down to 2), continued from the prefix cache, and after preemptions (a small KV cache), on
every kernel path this CPU has: bfloat16 on AMX and on AVX512-BF16 (block linear and decode attention forced
to each), float32 on the float32 block kernel and on dense weights (one row at a time: each row reads the
whole float32 weight, so that path gets 3 short neighbours, the crowds only change which rows sit beside
the target). With the default kernels (the block linear's implementation picked by row count, oneDNN's dense
products above 64 rows, SDPA prefill) the bfloat16 target's tokens change beside other requests and when
continued from the cache."""

from __future__ import annotations

import pytest
from cpu_features import MISSING_CPU_FEATURE

from tgi.backends.cpu import native
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.engine_startup import derive_limits
from tgi.core.sampling_params import SamplingParams

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not native.compiler_found(), reason="no C++ compiler to build the native kernels"),
]

LIMITS = dict(
    max_batch_total_tokens=4096, max_total_tokens=512, max_batch_prefill_tokens=128, max_num_seqs=40
)
# 16 tokens of this prompt are enough to tell the block kernels apart: with the bfloat16 block linear left to
# pick its implementation by row count (AVX512-BF16 for 1-2 rows, AMX above), the target's tokens change
# beside 1 and 31 others, from the cache beside 3 and after preemption
GREEDY = SamplingParams(max_new_tokens=16)
SEEDED = SamplingParams(
    max_new_tokens=16, do_sample=True, seed=20261125, temperature=0.9, top_k=40, top_p=0.9
)
TARGET = (
    "Here is a short lesson about art for children who are learning to paint for the first time. The three "
    "primary colors are"
)
OTHER_TEXTS = [
    "The capital of France is",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "La tour Eiffel est située à Paris. Elle a été construite",
    "Question: What is 17 multiplied by 23?\nAnswer:",
    "1, 1, 2, 3, 5, 8, 13,",
    "Here is a list of three fruits:\n1.",
    "The history of computing is longer than the history of computing hardware and modern computing "
    "technology and includes the history of methods intended for pen and paper.",
    "Hi",
]

#: kernel path -> (dtype, environment, crowd sizes): the switches force each implementation. A crowd of 31
#: runs decode batches of every size from 33 rows down to 2 (the others stop after 2 to 12 tokens), one of 1
#: the target's prefill beside a single short one.
PATHS = {
    "bfloat16-amx": (
        "bfloat16", {"TGI_CPU_BLOCK_IMPL": "amx", "TGI_CPU_DECODE_IMPL": "amx"}, (1, 31)
    ),
    "bfloat16-avx512-bf16": (
        "bfloat16", {"TGI_CPU_BLOCK_IMPL": "avx512-bf16", "TGI_CPU_DECODE_IMPL": "vector"}, (1, 31)
    ),
    "float32-blocks": ("float32", {}, (1, 31)),
    # every row of every dense product reads the whole float32 weight: 3 short neighbours (decodes of 5 rows
    # down to 2); its attention is float32-blocks' own, tested there beside 31
    "float32-dense": ("float32", {"TGI_CPU_BLOCK_KERNELS_F32": "0"}, (3,)),
}  # fmt: skip
NEEDS = {"bfloat16-amx": "amx_bf16", "bfloat16-avx512-bf16": "avx512_bf16"}


@pytest.fixture(scope="module", params=list(PATHS))
def path(request) -> str:
    flag = NEEDS.get(request.param)
    if flag and flag not in cpu_info().flags:
        pytest.skip(f"{MISSING_CPU_FEATURE}: {flag}")
    return request.param


@pytest.fixture(scope="module")
def engine(path) -> LLMEngine:
    dtype, env, _ = PATHS[path]
    with pytest.MonkeyPatch.context() as mp:  # read while the model loads and its kernels are chosen
        for name, value in env.items():
            mp.setenv(name, value)
        return LLMEngine.from_config(EngineConfig(dtype=dtype, deterministic=True, **LIMITS))


def make(engine: LLMEngine, **limits) -> LLMEngine:
    """A fresh engine (scheduler, block manager, limits) on `engine`'s runner, backend and KV storage."""
    config = EngineConfig(dtype=engine.config.dtype, deterministic=True, **{**LIMITS, **limits})
    config = derive_limits(config, engine.model_info, engine.runner, engine.backend)
    return LLMEngine(engine.backend, engine.runner, engine.tokenizer, config, engine.model_info)


def crowd(engine: LLMEngine, n: int) -> tuple[list[list[int]], list[SamplingParams]]:
    """`n` other requests: prompts of 1 to ~60 tokens, 2 to 12 new tokens, every fourth one sampled."""
    prompts, params = [], []
    for i in range(n):
        ids = engine.tokenizer.encode(OTHER_TEXTS[i % len(OTHER_TEXTS)])
        prompts.append(ids[: max(1, len(ids) - i // len(OTHER_TEXTS))])
        params.append(
            SamplingParams(max_new_tokens=2 + 5 * i % 11, do_sample=i % 4 == 3, seed=i, temperature=0.7)
        )
    return prompts, params


def targets_beside(engine: LLMEngine, target: list[int], n: int) -> list[list[int]]:
    prompts, params = crowd(engine, n)
    results = engine.generate([*prompts, target, target], [*params, GREEDY, SEEDED])
    return [r.token_ids for r in results[-2:]]


@pytest.fixture(scope="module")
def alone(engine) -> list[list[int]]:
    """The greedy and the seeded request's tokens, each alone on an engine without prefix caching."""
    solo = make(engine, prefix_caching=False)
    target = engine.tokenizer.encode(TARGET)
    return [solo.generate([target], p)[0].token_ids for p in (GREEDY, SEEDED)]


def test_the_runner_declares_itself_batch_invariant(engine):
    assert engine.runner.capabilities().batch_invariant
    kernels = engine.backend.describe_kernels(engine.config.dtype)
    assert "--deterministic" in kernels["prefill attention"] and "fixed" in kernels["threads"]


def test_the_same_tokens_beside_other_requests(engine, path, alone):
    target = engine.tokenizer.encode(TARGET)
    busy = make(engine, prefix_caching=False)
    for n in PATHS[path][2]:
        assert targets_beside(busy, target, n) == alone, f"beside {n} other requests"
    assert busy.stats().num_free_blocks == busy.stats().num_total_blocks


def test_the_same_tokens_continued_from_the_prefix_cache(engine, alone):
    target = engine.tokenizer.encode(TARGET)
    cached = make(engine, prefix_caching=True)
    cached.generate([target], SamplingParams(max_new_tokens=1))  # its full blocks stay cached
    hits = [cached.generate([target], p)[0] for p in (GREEDY, SEEDED)]
    assert all(r.final.num_cached_tokens >= 16 for r in hits)
    assert [r.token_ids for r in hits] == alone
    # and beside others, the target's prefix read from the cache while theirs are computed
    assert targets_beside(cached, target, 3) == alone


def test_the_same_tokens_after_preemption(engine, alone):
    target = engine.tokenizer.encode(TARGET)
    small = make(
        engine,
        prefix_caching=False,
        max_batch_total_tokens=96,
        max_total_tokens=96,
        max_batch_prefill_tokens=96,
    )
    # 6 blocks of 16: the two targets alone fill them by their last tokens, so 4 others preempt
    assert targets_beside(small, target, 4) == alone
    assert small.stats().num_preemptions > 0
    assert small.stats().num_free_blocks == small.stats().num_total_blocks
