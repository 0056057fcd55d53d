"""Pipeline parallelism over processes (gloo on the CPU): P stages of a tiny random float32 model give one
process's greedy tokens and logprobs, through chunked prefill, mixed prefill + decode steps cut in
micro-batches, preemption and recomputation; and so do 2 stages × 2 tensor-parallel shards (four ranks), also
over an int8 KV cache (each rank quantizes its own heads as one process does); guided decoding over stages on
the default model."""

from __future__ import annotations

import multiprocessing
import os
import re
from functools import cache

import pytest

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.parallel.runner import ShardFailure
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.tiny_models import save_random_model

VOCAB = 250
ATOL = 1e-4  # max |logprob difference| against one process, float32 (as the tensor-parallel tests)
# four requests of different lengths; 12 prompt tokens in chunks of 8 (chunked prefill, mixed steps)
PROMPTS = [[5, 17, 33, 2, 90, 41, 7, 8, 120, 3, 77, 61], [9, 4, 200], [11, 12, 13, 14, 15], [60] * 20]
# 4 blocks of 16 tokens for ~90 tokens of requests: sequences are preempted and recomputed
LIMITS = dict(max_batch_total_tokens=64, max_total_tokens=48, max_batch_prefill_tokens=8, max_num_seqs=4)


@cache
def _model(kind: str, root: str) -> str:
    # Llama: 3 layers over 2 stages (2 + 1), separate output head; Qwen2: tied head (the last stage reads
    # the embedding table), 4 key/value heads for 2 shards
    kv, tied = (2, False) if kind == "llama" else (4, True)
    folder = os.path.join(root, kind)
    save_random_model(folder, kind, vocab_size=VOCAB, num_kv_heads=kv, tie_word_embeddings=tied, num_layers=3)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pp-models"))
    return lambda kind: _model(kind, root)


def generate(folder: str, stages: int, shards: int, kv: str = "auto"):
    config = EngineConfig(
        model_id=folder, num_shard=shards, pipeline_parallel_size=stages, dtype="float32", kv_cache_dtype=kv,
        **LIMITS,
    )  # fmt: skip
    engine = LLMEngine.from_config(config)
    try:
        params = SamplingParams(max_new_tokens=12, ignore_eos=True, logprobs=True, prompt_logprobs=True)
        results = engine.generate(PROMPTS, params)
        preemptions = engine.stats().num_preemptions
    finally:
        engine.runner.shutdown()
    logprobs = [e.logprob for r in results for e in r.events]
    logprobs += [t.logprob for r in results for t in r.final.prompt_tokens[1:]]  # computed on the last stage
    return [r.token_ids for r in results], logprobs, preemptions


@cache
def _reference(folder: str, kv: str):
    return generate(folder, 1, 1, kv)


@pytest.mark.parametrize(
    ("kind", "stages", "shards", "kv"),
    [("llama", 2, 1, "auto"), ("qwen2", 2, 2, "auto"), ("qwen2", 2, 2, "int8")],
)
def test_stages_give_one_process_tokens(models, kind, stages, shards, kv):
    folder = models(kind)
    ref_tokens, ref_logprobs, ref_preemptions = _reference(folder, kv)
    tokens, logprobs, preemptions = generate(folder, stages, shards, kv)
    assert ref_preemptions > 0 and preemptions == ref_preemptions  # the same schedule, preemptions included
    assert tokens == ref_tokens
    diff = max(abs(a - b) for a, b in zip(logprobs, ref_logprobs, strict=True))
    print(f"{kind} PP={stages} TP={shards} KV {kv}: max |logprob difference| vs one process: {diff:.2e}")
    assert diff < ATOL
    assert not multiprocessing.active_children()  # every rank is gone after shutdown


def test_a_stage_killed_mid_generation_ends_the_engine_naming_it(models):
    config = EngineConfig(model_id=models("llama"), pipeline_parallel_size=2, dtype="float32", **LIMITS)
    engine = LLMEngine.from_config(config)
    try:
        engine.add_request([1, 2, 3], SamplingParams(max_new_tokens=40, ignore_eos=True))
        engine.step()
        worker = engine.runner.workers[0]  # rank 1: the last stage, which samples
        worker.process.kill()
        with pytest.raises(ShardFailure, match=r"shard rank 1 \(pid \d+\) died: killed by signal SIGKILL"):
            for _ in range(40):
                engine.step()
    finally:
        engine.runner.shutdown()
    assert not multiprocessing.active_children()


@pytest.mark.slow
def test_default_model_two_stages_follow_a_grammar():
    """SmolLM2-135M (GGUF, tied head) over 2 stages: a regex-guided request's token masks reach the last stage
    (which samples) with the step's delta; the plain request beside it is not held to them."""
    from tgi.core.guided import Grammar

    limits = dict(
        max_batch_total_tokens=512, max_total_tokens=128, max_batch_prefill_tokens=32, max_num_seqs=2
    )
    engine = LLMEngine.from_config(EngineConfig(pipeline_parallel_size=2, dtype="float32", **limits))
    try:
        ids = engine.tokenizer.encode("My phone number is")
        guided = SamplingParams(max_new_tokens=12, grammar=Grammar.regex("[0-9]{3}-[0-9]{4}"))
        results = engine.generate([ids, ids], [guided, SamplingParams(max_new_tokens=6)])
    finally:
        engine.runner.shutdown()
    assert re.fullmatch("[0-9]{3}-[0-9]{4}", results[0].generated_text), results[0].generated_text
    assert not re.fullmatch("[0-9]{3}-[0-9]{4}", results[1].generated_text)  # (one process: " 12345")
