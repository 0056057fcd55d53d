"""The TPU backend (JAX) on JAX's CPU devices (no TPU here) through `LLMEngine`:

* greedy parity with `transformers` in float32 on the default model (SmolLM2-135M-Instruct, GGUF), varied
  prompts one at a time and in flight together (staggered arrivals, prompts prefilled in chunks beside
  decodes), and its prompt logprobs;
* no compilation while serving: after warm-up, a mixed workload (greedy, seeded sampling with truncation and
  penalties, grammar, prompt logprobs, top tokens, chunked prefill beside decodes) traces and compiles
  nothing (JAX's own compile events are counted);
* `--num-shard 3` over 3 JAX CPU devices gives `transformers`' tokens, as one device does
  (small random-weight Llama and Qwen2 checkpoints, in a subprocess: the device count is fixed when JAX
  starts).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import jax
import pytest
from test_engine_parity import assert_same, run_staggered
from tpu_shards import PROMPTS as SHARD_PROMPTS

from tgi.backends.tpu.backend import TpuBackend
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.engine_startup import derive_limits
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import backend_registry

pytestmark = pytest.mark.slow

CACHE = Path(tempfile.gettempdir()) / "tgi-tests-jax-cache"
#: the e2e TPU server's limits too (tests/e2e/test_clients.py): the executables compiled by one are found by the
#: other in the persistent compilation cache
LIMITS = dict(max_total_tokens=256, max_batch_total_tokens=2048, max_batch_prefill_tokens=64, max_num_seqs=4)
N = 12
TEXTS = {
    "short": "The capital of France is",
    "code": 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "french": "La tour Eiffel est située à Paris. Elle a été construite",
    "japanese": "日本の首都は",
    "long": (
        "The history of computing is longer than the history of computing hardware and modern computing "
        "technology and includes the history of methods intended for pen and paper or for chalk and slate, "
        "with or without the aid of tables. Digital computing is intimately tied to the representation of "
        "numbers. But long before abstractions like the number arose, there were mathematical concepts to"
    ),
}


@pytest.fixture(scope="module")
def tpu_engine() -> LLMEngine:
    backend = TpuBackend(platform="cpu", cache_dir=str(CACHE))
    config = EngineConfig(backend="tpu", dtype="float32", **LIMITS)
    return LLMEngine.from_config(config, registry=backend_registry("tpu", lambda: backend))


@pytest.fixture(scope="module")
def make_tpu_engine(tpu_engine):
    """A fresh engine (scheduler, block manager, limits) on `tpu_engine`'s runner: no new compile."""

    def make(**limits) -> LLMEngine:
        e = tpu_engine
        config = EngineConfig(backend="tpu", dtype="float32", **{**LIMITS, **limits})
        config = derive_limits(config, e.model_info, e.runner, e.backend)
        return LLMEngine(e.backend, e.runner, e.tokenizer, config, e.model_info)

    return make


@pytest.fixture(scope="module")
def tpu_prompts(tpu_engine) -> dict[str, list[int]]:
    from tgi.core.tokenization import apply_chat_template

    ids = {name: list(tpu_engine.tokenizer.encode(text)) for name, text in TEXTS.items()}
    ids["chat"] = apply_chat_template(tpu_engine.tokenizer, [{"role": "user", "content": "Write a haiku."}])
    return ids


def test_greedy_alone_and_in_flight_equal_transformers(make_tpu_engine, tpu_prompts, hf_greedy_mismatches):
    params = SamplingParams(max_new_tokens=N)
    engine = make_tpu_engine()
    alone = {
        name: engine.generate([tpu_prompts[name]], params)[0].token_ids for name in ("short", "long", "chat")
    }
    assert_same(alone, tpu_prompts, hf_greedy_mismatches, N)
    engine = make_tpu_engine(max_batch_prefill_tokens=32)  # the long prompts are prefilled in chunks
    arrivals = [
        (at, name, tpu_prompts[name]) for at, name in zip([0, 0, 1, 3, 4, 6], tpu_prompts, strict=True)
    ]
    together, _, stats = run_staggered(engine, arrivals, params)
    assert_same(together, tpu_prompts, hf_greedy_mismatches, N)
    assert all(together[name] == tokens for name, tokens in alone.items())
    assert max(s.num_running for s in stats) == 4, "the requests were not in flight together"


def test_prompt_logprobs_equal_transformers(make_tpu_engine, tpu_prompts, hf_logprobs):
    ids = tpu_prompts["long"]  # prefilled in chunks of 32
    engine = make_tpu_engine(max_batch_prefill_tokens=32)
    [result] = engine.generate([ids], SamplingParams(max_new_tokens=1, prompt_logprobs=True))
    got = [t.logprob for t in result.events[0].prompt_tokens[1:]]
    ref = hf_logprobs(ids)
    expected = [float(ref[p - 1, ids[p]]) for p in range(1, len(ids))]
    assert got == pytest.approx(expected, abs=2e-3)


@pytest.mark.parametrize("k", [3, 25])  # 25: more than the device's top-k (20), taken on the host
def test_prompt_ranks_and_alternatives_equal_transformers(make_tpu_engine, tpu_prompts, hf_logprobs, k):
    ids = tpu_prompts["code"]
    engine = make_tpu_engine(max_batch_prefill_tokens=32)
    params = SamplingParams(max_new_tokens=1, prompt_logprobs=True, prompt_top_n_tokens=k)
    [result] = engine.generate([ids], params)
    ref, tol = hf_logprobs(ids), 2e-3  # no near-tie decides: values compared, ranks within the tolerance
    for p, token in enumerate(result.events[0].prompt_tokens[1:], start=1):
        row = ref[p - 1]
        best = row.topk(k).values.tolist()
        assert [t.logprob for t in token.top_tokens] == pytest.approx(best, abs=tol)
        assert all(abs(float(row[t.id]) - t.logprob) < tol for t in token.top_tokens)
        above = int((row > row[ids[p]] + tol).sum()), int((row > row[ids[p]] - tol).sum())
        assert above[0] + 1 <= token.rank <= above[1] + 1, (p, token.rank, above)


def test_no_compilation_while_serving(make_tpu_engine, tpu_prompts):
    from tgi.core.guided import Grammar

    compiles: list[str] = []

    def listen(event: str, *args, **kwargs) -> None:
        if event.startswith("/jax/core/compile/"):
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        engine = make_tpu_engine(max_batch_prefill_tokens=32)
        workload = [
            SamplingParams(max_new_tokens=8),
            SamplingParams(max_new_tokens=6, do_sample=True, seed=3, top_k=20, top_p=0.9, temperature=0.8),
            SamplingParams(max_new_tokens=5, repetition_penalty=1.3, frequency_penalty=0.5, top_n_tokens=3),
            SamplingParams(max_new_tokens=4, prompt_logprobs=True, typical_p=0.5, do_sample=True, seed=1),
            SamplingParams(max_new_tokens=4, grammar=Grammar.regex("[0-9]+")),
            SamplingParams(max_new_tokens=5, stop=("\n",), top_n_tokens=25),  # more than the device's 20
        ]
        pending = list(zip(tpu_prompts.values(), workload, strict=False))
        steps, top = 0, {}
        while pending or engine.has_unfinished():
            if pending and steps % 2 == 0:  # arrivals while others decode: mixed steps
                ids, params = pending.pop(0)
                engine.add_request(ids, params, request_id=f"r{steps // 2}")
            for event in engine.step():
                top.setdefault(event.request_id, []).append(len(event.top_tokens))
            steps += 1
        assert steps > 10
        assert set(top["r2"]) == {3} and set(top["r5"]) == {25}
        assert compiles == [], f"{len(compiles)} compile events while serving: {compiles[:5]}"
        jax.jit(lambda x: x * 3 + 1)(jax.numpy.arange(3))  # the listener does see a compile
        assert compiles
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def test_three_shards_give_the_same_tokens(tmp_path):
    from tgi.core.testing.model import transformers_greedy
    from tgi.core.testing.tiny_models import save_random_model

    dims = dict(
        hidden_size=96, intermediate_size=96, num_heads=6, num_kv_heads=3, max_position_embeddings=128
    )
    llama = save_random_model(tmp_path / "llama", "llama", vocab_size=252, **dims)  # vocabulary split 3 ways
    qwen2 = save_random_model(tmp_path / "qwen2", "qwen2", vocab_size=250, tie_word_embeddings=True, **dims)
    script = Path(__file__).parents[1] / "helpers" / "tpu_shards.py"
    out = subprocess.run(
        [sys.executable, str(script), str(CACHE), str(llama), str(qwen2)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["devices"] == ["3 JAX CPU devices for --num-shard 3"]
    for folder in (llama, qwen2):  # one device's tokens are transformers' (the conformance suite's check)
        assert result["tokens"][str(folder)] == transformers_greedy(folder, SHARD_PROMPTS, 8), folder


def test_the_kv_cache_is_updated_in_place(tmp_path):
    """The decoder's executables alias the donated caches to their outputs, and their scratch memory is a
    small part of the cache (no layer of it is copied out and back: a step moves only the blocks it reads;
    copying layers cost scratch of at least one layer of both caches, here a quarter of the cache)."""
    from tgi.core.testing.model import write_tiny_llama

    model = write_tiny_llama(tmp_path / "tiny")
    backend = TpuBackend(platform="cpu", cache_dir=str(CACHE))
    config = EngineConfig(
        model_id=str(model), backend="tpu", dtype="float32", max_total_tokens=64,
        max_batch_total_tokens=65536, max_batch_prefill_tokens=16, max_num_seqs=4,
    )  # fmt: skip
    runner = LLMEngine.from_config(config, registry=backend_registry("tpu", lambda: backend)).runner
    stats = [ex.memory_analysis() for ex in runner._decoders.values()]
    cache_bytes = runner.k_cache.nbytes + runner.v_cache.nbytes
    assert cache_bytes >= 32 << 20 and all(s.alias_size_in_bytes == cache_bytes for s in stats)
    assert max(s.temp_size_in_bytes for s in stats) < cache_bytes / 8
    runner.shutdown()
