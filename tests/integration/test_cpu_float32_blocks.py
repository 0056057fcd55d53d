"""Float32 models on CPUs without bfloat16 arithmetic compute with the GGUF blocks: forced here
(`TGI_CPU_BLOCK_KERNELS_F32=1`), the default model's greedy tokens equal the dense float32 products' (the
same weights, float32 sums in another order) where its Q4_1 / Q8_0 blocks run on the float32 AVX2 kernel.
Where "auto" computes them on int8 inputs (avx2-int8: AVX2 without AVX512-VNNI), the products carry the
inputs' rounding to int8 per 32 columns (llama.cpp's q8_0 / q8_1): the greedy tokens (blocks for inputs
of up to 16 rows, as served: the decode steps) follow the dense ones for at least `INT8_AGREEMENT` of the
steps (up to each prompt's first difference), and with every product on the blocks (`TGI_CPU_BLOCK_ROWS`
raised, prefill included) the next-token log-probs of the dense model's continuation stay within
`INT8_TOL` of the dense ones."""

from __future__ import annotations

import pytest

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams

pytestmark = pytest.mark.slow

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Here is a list of three fruits:\n1.",
    "Question: What is 17 multiplied by 23?\nAnswer:",
]
NEW = 16
#: int8 inputs (avx2-int8): max |log p| difference of a next token from the dense float32 model's, and the
#: share of greedy steps equal to its (measured on the AMD EPYC family 23 model 1, Zen 1: 0.27, and 60 of
#: 64 steps, the fourth prompt's "383<|im_end|>" for "383\n\n" after 12; every product on int8 inputs, the
#: prefill's too, 32 of 64: near-ties of the 135M model, such as "\ndef" / "def" first)
INT8_TOL = 0.5
INT8_AGREEMENT = 0.75


def _engine(monkeypatch, forced: str) -> LLMEngine:
    monkeypatch.setenv("TGI_CPU_BLOCK_KERNELS_F32", forced)
    return LLMEngine.from_config(
        EngineConfig(
            dtype="float32", max_batch_total_tokens=2048, max_total_tokens=512, max_batch_prefill_tokens=256,
            max_num_seqs=8,
        )
    )  # fmt: skip


def _greedy(engine: LLMEngine) -> tuple[list[list[int]], dict[str, str], int]:
    kernels = engine.backend.describe_kernels("float32")
    # the quantized-linear seam routes a layer's small inputs to its block kernel (`RowSplitKernel.quantized`)
    block_linears = sum(
        type(getattr(getattr(m, "linear_kernel", None), "quantized", None)).__name__ == "BlockLinearKernel"
        for m in engine.runner.model.modules()
    )
    results = engine.generate(PROMPTS, SamplingParams(max_new_tokens=NEW, ignore_eos=True))
    return [r.token_ids for r in results], kernels, block_linears


def _forced(engine: LLMEngine, continuations: list[list[int]]) -> list[list[float]]:
    """The next-token log-probs over prompt + `continuations` (teacher forced)."""
    ids = [engine.tokenizer.encode(p) + c for p, c in zip(PROMPTS, continuations, strict=True)]
    results = engine.generate(ids, SamplingParams(max_new_tokens=1, prompt_logprobs=True))
    return [[t.logprob for t in r.final.prompt_tokens[1:]] for r in results]


def _agreement(greedy: list[list[int]], ref: list[list[int]]) -> int:
    """Greedy steps equal to the reference's, up to each prompt's first difference."""
    steps = 0
    for g, r in zip(greedy, ref, strict=True):
        steps += next((i for i, (a, b) in enumerate(zip(g, r, strict=True)) if a != b), len(r))
    return steps


def test_float32_block_kernels_keep_the_greedy_tokens(monkeypatch):
    from tgi.backends.cpu import native

    impls = native.block_impls()
    int8 = "avx2-int8" in impls and "avx512-vnni" not in impls
    engine = _engine(monkeypatch, "0")
    dense, dense_kernels, none = _greedy(engine)
    dense_forced = _forced(engine, dense) if int8 else None
    del engine
    engine = _engine(monkeypatch, "1")
    blocks, block_kernels, block_linears = _greedy(engine)
    assert dense_kernels["gguf block linear"] == "off (dense weights)" and none == 0
    assert block_kernels["gguf block linear"].startswith("float32 ")
    assert block_linears == 30 * 4 + 1  # qkv, o, gate-up, down in every layer, and the tied head
    if not int8:
        assert blocks == dense
        return
    agree = _agreement(blocks, dense)
    del engine
    monkeypatch.setenv("TGI_CPU_BLOCK_ROWS", "100000")  # every product on the blocks, prefill included
    engine = _engine(monkeypatch, "1")
    diff = max(
        abs(a - b)
        for ra, rb in zip(_forced(engine, dense), dense_forced, strict=True)
        for a, b in zip(ra, rb, strict=True)
    )
    print(f"avx2-int8: max |log p| difference {diff:.3f}, greedy steps equal {agree} of {NEW * len(PROMPTS)}")
    assert diff < INT8_TOL
    assert agree >= INT8_AGREEMENT * NEW * len(PROMPTS)
