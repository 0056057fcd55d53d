"""The CPU backend serving over an int8 KV cache, combined with what else an engine does: the runner-level
conformance checks (greedy tokens equal `transformers`' on the tiny model, preemption and recomputation, the
prefix cache, cancellation, LoRA adapters at run time, `--deterministic`'s batch invariance, overlapped steps),
run on engines whose cache is int8; and speculation (n-gram guesses and a draft model, whose own cache is int8
too) gives the tokens of plain decoding. Tensor and pipeline parallelism: tests/parallel/test_pipeline_parallel.py.

(Comparisons with `transformers`' logprobs are left out: a quantized cache moves them by its own error, which
the conformance suite's `test_quantized_kv_cache_is_close_or_refused` bounds.)"""

from __future__ import annotations

import pytest

from tgi.backends.cpu import native
from tgi.core.testing.capability_conformance import CapabilityChecks
from tgi.core.testing.generation_conformance import GenerationChecks
from tgi.core.testing.model import PROMPTS, write_tiny_llama

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)


class TestInt8CacheWithEverythingElse(CapabilityChecks, GenerationChecks):
    backend_name = "cpu"
    test_prompt_logprobs_match_transformers_or_are_refused = None
    test_prompt_top_logprobs_match_transformers_or_are_refused = None
    test_pooling_matches_transformers_or_is_refused = None  # pooled over the quantized cache
    test_token_embeddings_match_transformers_or_are_refused = None  # read over the quantized cache too

    def make_engine(self, backend, model_path, checked, **limits):
        limits.setdefault("kv_cache_dtype", "int8")
        engine = super().make_engine(backend, model_path, checked, **limits)
        assert engine.runner.kv_cache_spec().kv_dtype == limits["kv_cache_dtype"]
        return engine


@pytest.mark.parametrize("kv", ["int8", "fp8_e4m3fn"])
def test_speculation_over_a_quantized_cache_gives_plain_decoding_s_tokens(tmp_path, kv):
    from tgi.core.config import EngineConfig
    from tgi.core.engine import LLMEngine
    from tgi.core.sampling_params import SamplingParams

    model, draft = write_tiny_llama(tmp_path / "m"), write_tiny_llama(tmp_path / "d", seed=1)
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    limits = dict(model_id=str(model), dtype="float32", max_batch_total_tokens=1024, max_total_tokens=128)
    tokens = {}
    for name, extra in (
        ("plain", {}),
        ("ngram", {"speculate": 2}),
        ("draft", {"speculate": 2, "speculative_model": str(draft)}),
    ):
        engine = LLMEngine.from_config(EngineConfig(**limits, **extra, kv_cache_dtype=kv))
        tokens[name] = [r.token_ids for r in engine.generate([list(p) for p in PROMPTS], params)]
    assert tokens["ngram"] == tokens["plain"] and tokens["draft"] == tokens["plain"]
