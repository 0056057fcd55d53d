"""The generation checks of the runner-level conformance suite (`runner_conformance.RunnerConformance`
says what each one asserts): greedy tokens equal `transformers`', preemption and cancellation keep them."""

from __future__ import annotations

import pytest

from tgi.core.testing.conformance_engines import ConformanceEngines
from tgi.core.testing.model import PROMPTS


class GenerationChecks(ConformanceEngines):
    """Greedy generation through continuous batching, chunked prefill, preemption and cancellation."""

    def test_greedy_generation_matches_transformers(
        self, engine_backend, tiny_llama, batches_checked, reference
    ):
        engine = self.make_engine(engine_backend, tiny_llama, batches_checked)
        results = engine.generate([list(p) for p in PROMPTS], self._params())
        assert [r.token_ids for r in results] == reference
        self._assert_all_blocks_free(engine)

    def test_preemption_keeps_the_tokens(self, engine_backend, tiny_llama, batches_checked, reference):
        bs = self.engine_block_size(engine_backend)
        budget = max(64, bs)  # 64 tokens: the longest request (45 + 8) fits, all three (95) do not
        engine = self.make_engine(
            engine_backend, tiny_llama, batches_checked, max_total_tokens=64, max_batch_total_tokens=budget
        )
        results = engine.generate([list(p) for p in PROMPTS], self._params())
        if engine.scheduler.num_preemptions == 0:
            pytest.skip(f"with KV blocks of {bs} tokens, one block held every request: nothing preempted")
        assert [r.token_ids for r in results] == reference
        self._assert_all_blocks_free(engine)

    def test_cancellation_frees_blocks_and_spares_the_others(
        self, engine_backend, tiny_llama, batches_checked, reference
    ):
        engine = self.make_engine(engine_backend, tiny_llama, batches_checked, max_num_seqs=3)
        params = self._params()
        ids = [engine.add_request(list(p), params) for p in PROMPTS]
        queued = engine.add_request(list(PROMPTS[1]), params)  # a fourth: waits (max_num_seqs=3)
        tokens: dict[str, list[int]] = {rid: [] for rid in [*ids, queued]}
        running: list[str] = []
        for _ in range(20):  # until a request runs (it has its first token)
            for event in engine.step():
                tokens[event.request_id].append(event.token_id)
            running = [rid for rid in ids if tokens[rid]]
            if running:
                break
        assert running and not tokens[queued], "a request should run and the fourth wait"
        victim = running[-1]
        assert engine.abort(victim) and engine.abort(queued)
        cancelled_at = len(tokens[victim])
        while engine.has_unfinished():
            for event in engine.step():
                tokens[event.request_id].append(event.token_id)
        assert len(tokens[victim]) == cancelled_at < self.max_new_tokens and tokens[queued] == []
        spared = [i for i, rid in enumerate(ids) if rid != victim]
        assert [tokens[ids[i]] for i in spared] == [reference[i] for i in spared]
        self._assert_all_blocks_free(engine)
