"""Prefix caching with --num-shard: the scheduler and block manager are shared by the ranks, so cached
blocks are read by every rank's attention alike and the tokens equal one rank's and the cache off."""

from __future__ import annotations

import multiprocessing

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.engine_startup import derive_limits
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.tiny_models import save_random_model

SHARED = [(7 * i + 3) % 250 for i in range(45)]  # two full blocks of 16 and a partial one
PROMPTS = [[*SHARED, 11, 12], [*SHARED, 40], [*SHARED[:20], 99, 98, 97]]


def test_two_shards_read_the_prefix_cache_and_give_one_ranks_tokens(tmp_path):
    folder = str(tmp_path / "llama")
    save_random_model(folder, "llama", vocab_size=250, num_kv_heads=2, tie_word_embeddings=False)
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    limits = dict(
        max_batch_total_tokens=1024, max_total_tokens=256, max_batch_prefill_tokens=16, max_num_seqs=4
    )
    runs = {}

    def run(engine: LLMEngine, key: tuple[int, bool]) -> None:
        warm = engine.generate(PROMPTS[:1], params)  # the shared prefix is cached after this
        rest = engine.generate(PROMPTS, params)
        tokens = [r.token_ids for r in warm + rest]
        runs[key] = (tokens, [r.final.num_cached_tokens for r in rest], engine.stats())

    one = LLMEngine.from_config(
        EngineConfig(model_id=folder, dtype="float32", prefix_caching=False, **limits)
    )
    try:
        run(one, (1, False))
    finally:
        one.runner.shutdown()
    # the two shards' group started once: the cache on first, on KV storage nothing wrote before (a cached
    # block read from the wrong place cannot find the right values left there by an earlier run); then the
    # cache off, an engine of its own on the same ranks, which reads only blocks it wrote itself
    cached = LLMEngine.from_config(
        EngineConfig(model_id=folder, num_shard=2, dtype="float32", prefix_caching=True, **limits)
    )
    try:
        run(cached, (2, True))
        config = EngineConfig(model_id=folder, num_shard=2, dtype="float32", prefix_caching=False, **limits)
        config = derive_limits(config, cached.model_info, cached.runner, cached.backend)
        run(LLMEngine(cached.backend, cached.runner, cached.tokenizer, config, cached.model_info), (2, False))
    finally:
        cached.runner.shutdown()
    assert runs[(2, True)][0] == runs[(2, False)][0] == runs[(1, False)][0]
    assert runs[(2, True)][1] == [32, 32, 16] and runs[(2, False)][1] == [0, 0, 0]
    assert runs[(2, True)][2].num_prefix_cache_hit_tokens >= 80
    assert not multiprocessing.active_children()
