"""Float32 models on CPUs without bfloat16 arithmetic compute with the GGUF blocks (AVX2 float32 kernel):
forced here (`TGI_CPU_BLOCK_KERNELS_F32=1`), the default model's greedy tokens equal the dense float32
products' (the same weights, float32 sums in another order). On a CPU with bfloat16 arithmetic the session's
float32 engine (`engine`, conftest.py) is the dense one: its weights are reused (`make_engine`) rather than
loaded a second time."""

from __future__ import annotations

import pytest

from tgi.backends.cpu.cpuinfo import cpu_info
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
#: the 4 prompts (37 tokens) are prefilled in one step and decoded together by both engines
LIMITS = dict(max_batch_total_tokens=2048, max_total_tokens=512, max_batch_prefill_tokens=64, max_num_seqs=4)


def _greedy(engine: LLMEngine) -> tuple[list[list[int]], dict[str, str], int]:
    kernels = engine.backend.describe_kernels("float32")
    # the quantized-linear seam routes a layer's small inputs to its block kernel (`RowSplitKernel.quantized`)
    block_linears = sum(
        type(getattr(getattr(m, "linear_kernel", None), "quantized", None)).__name__ == "BlockLinearKernel"
        for m in engine.runner.model.modules()
    )
    results = engine.generate(PROMPTS, SamplingParams(max_new_tokens=16, ignore_eos=True))
    return [r.token_ids for r in results], kernels, block_linears


def test_float32_block_kernels_keep_the_greedy_tokens(monkeypatch, request):
    if cpu_info().has_native_bf16:  # float32 keeps the dense products here: the session's engine is dense
        dense_engine = request.getfixturevalue("make_engine")(**LIMITS)
    else:
        monkeypatch.setenv("TGI_CPU_BLOCK_KERNELS_F32", "0")
        dense_engine = LLMEngine.from_config(EngineConfig(dtype="float32", **LIMITS))
    dense, dense_kernels, none = _greedy(dense_engine)
    monkeypatch.setenv("TGI_CPU_BLOCK_KERNELS_F32", "1")
    blocks, block_kernels, block_linears = _greedy(
        LLMEngine.from_config(EngineConfig(dtype="float32", **LIMITS))
    )
    assert dense_kernels["gguf block linear"] == "off (dense weights)" and none == 0
    assert block_kernels["gguf block linear"].startswith("float32 ")
    assert block_linears == 30 * 4 + 1  # qkv, o, gate-up, down in every layer, and the tied head
    assert blocks == dense
