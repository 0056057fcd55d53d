"""Prefix caching with --num-shard: the scheduler and block manager are shared by the ranks, so cached
blocks are read by every rank's attention alike and the tokens equal one rank's and the cache off."""

from __future__ import annotations

import multiprocessing

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.tiny_models import save_random_model

SHARED = [(7 * i + 3) % 250 for i in range(45)]  # two full blocks of 16 and a partial one
PROMPTS = [[*SHARED, 11, 12], [*SHARED, 40], [*SHARED[:20], 99, 98, 97]]


def test_two_shards_read_the_prefix_cache_and_give_one_ranks_tokens(tmp_path):
    folder = str(tmp_path / "llama")
    save_random_model(folder, "llama", vocab_size=250, num_kv_heads=2, tie_word_embeddings=False)
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    runs = {}
    for num_shard, caching in ((1, False), (2, False), (2, True)):
        config = EngineConfig(
            model_id=folder, num_shard=num_shard, dtype="float32", prefix_caching=caching,
            max_batch_total_tokens=1024, max_total_tokens=256, max_batch_prefill_tokens=16, max_num_seqs=4,
        )  # fmt: skip
        engine = LLMEngine.from_config(config)
        try:
            warm = engine.generate(PROMPTS[:1], params)  # the shared prefix is cached after this
            rest = engine.generate(PROMPTS, params)
            stats = engine.stats()
        finally:
            engine.runner.shutdown()
        tokens = [r.token_ids for r in warm + rest]
        runs[(num_shard, caching)] = (tokens, [r.final.num_cached_tokens for r in rest], stats)
    assert runs[(2, True)][0] == runs[(2, False)][0] == runs[(1, False)][0]
    assert runs[(2, True)][1] == [32, 32, 16] and runs[(2, False)][1] == [0, 0, 0]
    assert runs[(2, True)][2].num_prefix_cache_hit_tokens >= 80
    assert not multiprocessing.active_children()
