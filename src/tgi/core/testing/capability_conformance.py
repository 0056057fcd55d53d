"""The capability checks of the runner-level conformance suite (`runner_conformance.RunnerConformance`
says what each one asserts): a runner either honours what its `capabilities()` claim (grammar masks,
prompt logprobs, LoRA adapters at run time, batch invariance, overlapped steps, pooling) or has requests
for it refused by name."""

from __future__ import annotations

import pytest

from tgi.core.interfaces.batch import ScheduledBatch
from tgi.core.testing.conformance_engines import ConformanceEngines
from tgi.core.testing.model import PROMPTS


class CapabilityChecks(ConformanceEngines):
    """One check per capability a runner may claim: honoured when claimed, refused by name when not."""

    def test_grammar_masks_are_honoured(self, engine_backend, tiny_llama, batches_checked):
        from tgi.core.guided import Grammar
        from tgi.core.interfaces.batch import ScheduledSequence
        from tgi.core.request import ValidationError
        from tgi.core.sampling_params import SamplingParams
        from tgi.core.testing.sampling_cases import pack_token_masks

        engine = self.make_engine(engine_backend, tiny_llama, batches_checked)
        if not engine.runner.capabilities().token_masks:
            with pytest.raises(ValidationError, match="grammar masks"):
                engine.add_request(list(PROMPTS[0]), SamplingParams(grammar=Grammar.regex("[a-z]+")))
            return
        vocab, bs = engine.model_info.vocab_size, engine.config.block_size
        # a batch the runner's constraints allow: up to three short prompts, prefilled in one step
        c = engine.runner.constraints()
        alone = c.prefill_room(0, 0)  # a padded prefill area: the longest chunk that fits alone
        fits = [
            p
            for p in (PROMPTS[1], PROMPTS[2], PROMPTS[0])
            if len(p) <= min(max(c.prefill_buckets or (len(p),)), alone or len(p))
        ]
        prompts = fits[: min(3, c.max_batch_size or 3)]

        def too_big(prompts) -> bool:  # beyond the runner's step: its tokens or its padded prefill area
            area = c.padded_prefill_tokens(len(prompts), max(map(len, prompts)))
            padded = c.max_padded_prefill_tokens is not None and (
                area is None or area > c.max_padded_prefill_tokens
            )
            return padded or (c.max_batch_tokens is not None and sum(map(len, prompts)) > c.max_batch_tokens)

        while too_big(prompts):
            prompts.pop()  # within the runner's step
        params = [SamplingParams(), SamplingParams(do_sample=True, seed=11), SamplingParams()][: len(prompts)]
        masked_rows = (0, 1) if len(prompts) == 3 else (0,)

        def step(token_masks):  # on blocks no request owns
            seqs, first = [], 0
            for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
                blocks = list(range(first, first + -(-len(prompt) // bs)))
                first += len(blocks)
                seqs.append(
                    ScheduledSequence(
                        f"m{i}", list(prompt), 0, blocks, True, True, p, 11, len(prompt), list(prompt)
                    )
                )
            return engine.runner.execute(
                ScheduledBatch(1, seqs, len(seqs), token_masks=token_masks)
            ).token_ids

        free = step(None)
        allowed = [{(free[0] + 1) % vocab, (free[0] + 7) % vocab}, {(free[-1] + 3) % vocab}][
            : len(masked_rows)
        ]
        masked = step(pack_token_masks(masked_rows, allowed, vocab))
        for row, tokens in zip(masked_rows, allowed, strict=True):
            assert masked[row] in tokens, (masked, allowed)
        if len(prompts) > len(masked_rows):
            assert masked[-1] == free[-1], "an unmasked row changed"

    def test_prompt_logprobs_match_transformers_or_are_refused(
        self, engine_backend, tiny_llama, batches_checked
    ):
        from tgi.core.request import ValidationError
        from tgi.core.sampling_params import SamplingParams
        from tgi.core.testing.model import transformers_prompt_logprobs

        engine = self.make_engine(engine_backend, tiny_llama, batches_checked)
        params = SamplingParams(max_new_tokens=2, prompt_logprobs=True)
        prompt = list(PROMPTS[0])  # 45 tokens: two chunks where the runner chunks prefills
        if not engine.runner.capabilities().prompt_logprobs:
            with pytest.raises(ValidationError, match="prompt logprobs"):
                engine.add_request(prompt, params)
            return
        [result] = engine.generate([prompt], params)
        got = [t.logprob for t in result.final.prompt_tokens]
        assert got[0] is None and len(got) == len(prompt)
        if engine.config.dtype == "float32":
            expected = transformers_prompt_logprobs(tiny_llama, prompt)
            assert max(abs(a - b) for a, b in zip(got[1:], expected, strict=True)) < 1e-3
        else:  # rounded activations: finite log-probabilities
            assert all(lp <= 0.0 for lp in got[1:])

    def test_prompt_top_logprobs_match_transformers_or_are_refused(
        self, engine_backend, tiny_llama, batches_checked
    ):
        from tgi.core.request import ValidationError
        from tgi.core.sampling_params import SamplingParams
        from tgi.core.testing.model import transformers_prompt_logprob_rows

        engine = self.make_engine(engine_backend, tiny_llama, batches_checked)
        k = 3
        params = SamplingParams(max_new_tokens=2, prompt_logprobs=True, prompt_top_n_tokens=k)
        prompt = list(PROMPTS[0])  # 45 tokens: two chunks where the runner chunks prefills
        features = engine.runner.capabilities()
        if not (features.prompt_logprobs and features.prompt_top_logprobs):
            with pytest.raises(ValidationError, match=r"prompt.logprobs"):
                engine.add_request(prompt, params)
            return
        [result] = engine.generate([prompt], params)
        tokens = result.final.prompt_tokens
        assert len(tokens) == len(prompt) and tokens[0].rank is None and not tokens[0].top_tokens
        for t in tokens[1:]:  # ranks agree with the alternatives, most likely first
            tops = [a.logprob for a in t.top_tokens]
            assert len(tops) == k and tops == sorted(tops, reverse=True), t
            assert t.rank >= 1 and (t.rank > k or t.top_tokens[t.rank - 1].logprob == t.logprob), t
            assert t.rank <= k or t.logprob <= tops[-1], t
        if engine.config.dtype == "float32":  # the ranks and the alternatives transformers computes
            rows = transformers_prompt_logprob_rows(tiny_llama, prompt)
            tol = 1e-3  # no near-tie decides: ids and ranks are checked against the values within it
            for t, row in zip(tokens[1:], rows, strict=True):
                best = sorted(row, reverse=True)[:k]
                assert all(abs(a.logprob - b) < tol for a, b in zip(t.top_tokens, best, strict=True)), t
                assert all(abs(a.logprob - row[a.id]) < tol for a in t.top_tokens), t
                above = sum(lp > row[t.id] + tol for lp in row), sum(lp > row[t.id] - tol for lp in row)
                assert above[0] + 1 <= t.rank <= above[1] + 1, (t, above)

    def test_lora_adapters_at_run_time_or_refused(
        self, engine_backend, tiny_llama, batches_checked, reference, tmp_path
    ):
        from tgi.core.config import ConfigError
        from tgi.core.sampling_params import SamplingParams

        engine = self.make_engine(engine_backend, tiny_llama, batches_checked)
        if not engine.runner.capabilities().lora_runtime_loading:
            with pytest.raises(ConfigError, match="LoRA adapters at run time"):
                engine.lora.load("a", str(tmp_path))
            return
        pytest.importorskip("peft", reason="peft makes the adapter (the `lora` extra)")
        from tgi.core.testing.lora import peft_greedy, write_random_lora

        adapter = write_random_lora(
            tmp_path / "a", tiny_llama, r=4, target_modules=("q_proj", "v_proj", "down_proj"), seed=5
        )
        engine.lora.load("a", str(adapter))
        # two short prompts: interpreted kernels (Triton's interpreter) take seconds a step
        short = PROMPTS[1:]
        requests = [(p, "a") for p in short] + [(PROMPTS[1], None)]
        results = engine.generate(
            [list(p) for p, _ in requests],
            [
                SamplingParams(max_new_tokens=self.max_new_tokens, ignore_eos=True, adapter_id=a)
                for _, a in requests
            ],
        )
        tokens = [r.token_ids for r in results]
        if engine.config.dtype == "float32":
            assert tokens[:-1] == peft_greedy(tiny_llama, adapter, short, self.max_new_tokens)
            assert tokens[-1] == reference[1]
        engine.lora.unload("a")
        assert engine.model_info.lora_adapters == ()
        [result] = engine.generate([list(PROMPTS[2])], self._params())
        assert result.token_ids == reference[2]
        self._assert_all_blocks_free(engine)

    def test_deterministic_mode_is_batch_invariant_or_refused(self, tiny_llama, batches_checked):
        from tgi.core.config import ConfigError
        from tgi.core.sampling_params import SamplingParams

        backend = self.make_backend()  # its own: the mode stays with the backend it was asked of
        settings = dict(deterministic=True, max_num_seqs=16, prefix_caching=False)
        try:
            engine = self.make_engine(backend, tiny_llama, batches_checked, **settings)
        except ConfigError as e:
            assert "--deterministic" in str(e), f"the refusal does not name the flag: {e}"
            return
        assert engine.runner.capabilities().batch_invariant
        target = list(PROMPTS[0])  # 45 tokens: chunked differently beside others
        greedy = self._params()
        seeded = SamplingParams(
            max_new_tokens=self.max_new_tokens, ignore_eos=True, do_sample=True, seed=1234, temperature=0.8,
            top_k=20, top_p=0.9,
        )  # fmt: skip
        others = [list(PROMPTS[1]), list(PROMPTS[2]), list(PROMPTS[0][:30]), [9, 8, 7]] * 2
        alone = [engine.generate([target], p)[0].token_ids for p in (greedy, seeded)]

        def targets_beside(engine, crowd: list[list[int]]) -> list[list[int]]:
            results = engine.generate([*crowd, target, target], [greedy] * len(crowd) + [greedy, seeded])
            return [r.token_ids for r in results[-2:]]

        # beside 7 (prefills chunked elsewhere, decodes in a batch of 9; `deterministic_crowd`); the preemption
        # check below runs it beside 4
        crowd = self.deterministic_crowd
        assert targets_beside(engine, others[:crowd]) == alone, f"beside {crowd} other requests"
        cached = self.make_engine(
            backend, tiny_llama, batches_checked, **{**settings, "prefix_caching": True}
        )
        if cached.config.prefix_caching:
            cached.generate([target], SamplingParams(max_new_tokens=1))  # its full blocks stay cached
            hits = [cached.generate([target], p)[0] for p in (greedy, seeded)]
            assert all(r.final.num_cached_tokens > 0 for r in hits)
            assert [r.token_ids for r in hits] == alone, "continued from the prefix cache"
        small = self.make_engine(
            backend, tiny_llama, batches_checked, **settings, max_total_tokens=64, max_batch_total_tokens=64
        )
        assert targets_beside(small, others[:4]) == alone, "with preemptions"
        if small.scheduler.num_preemptions == 0:
            pytest.skip("nothing was preempted: the check of tokens after a preemption did not happen")
        self._assert_all_blocks_free(small)

    def test_overlapped_steps_give_the_tokens_of_waited_ones(self, tiny_llama, batches_checked):
        from tgi.core.sampling_params import SamplingParams

        backend = self.make_backend()
        overlapped = self.make_engine(backend, tiny_llama, batches_checked)
        if not overlapped.runner.capabilities().async_steps:
            assert not overlapped.steps.overlapping  # every step waited for, as the contract's default
            return
        waited = self.make_engine(backend, tiny_llama, batches_checked, async_scheduling=False)
        greedy = self._params()
        [reference] = waited.generate([list(PROMPTS[1])], greedy)
        params = [
            greedy,
            # ends at its third token: the step it ran too many is dropped
            SamplingParams(
                max_new_tokens=self.max_new_tokens, ignore_eos=True, stop_token_ids=(reference.token_ids[2],)
            ),
            SamplingParams(
                max_new_tokens=self.max_new_tokens, ignore_eos=True, do_sample=True, seed=5, temperature=0.7
            ),
            SamplingParams(
                max_new_tokens=self.max_new_tokens, ignore_eos=True, repetition_penalty=1.3
            ),  # waited
        ]
        prompts = [list(PROMPTS[0]), list(PROMPTS[1]), list(PROMPTS[2]), list(PROMPTS[1])]
        got = overlapped.generate(prompts, params)
        want = waited.generate(prompts, params)
        assert [r.token_ids for r in got] == [r.token_ids for r in want]
        assert [r.finish_reason for r in got] == [r.finish_reason for r in want]
        assert overlapped.steps.num_overlapped > 0, "the runner claims async_steps, but no step overlapped"
        self._assert_all_blocks_free(overlapped)

    def test_pooling_matches_transformers_or_is_refused(self, engine_backend, tiny_llama, batches_checked):
        from tgi.core.config import ConfigError
        from tgi.core.sampling_params import SamplingParams
        from tgi.core.testing.model import transformers_last_hidden_state

        try:  # `--runner pooling`: last-token pooling of the causal LM, normalized by the server
            engine = self.make_engine(engine_backend, tiny_llama, batches_checked, runner="pooling")
        except ConfigError as exc:  # a runner that does not claim `pooling` is refused at start, by name
            assert "cannot pool" in str(exc), exc
            return
        assert engine.runner.capabilities().pooling and engine.model_info.pooling is not None
        # each prompt comes whole (a pooling runner does not chunk): those that fit one prefill step
        params = SamplingParams(max_new_tokens=1)
        prompts = [list(p) for p in PROMPTS if len(p) <= engine.config.max_batch_prefill_tokens]
        ids = [engine.add_validated_request(engine.validate(p, params, pooling=True)) for p in prompts]
        vectors: dict[str, tuple[float, ...]] = {}
        while engine.has_unfinished():
            for event in engine.step():
                assert event.finish_reason is not None and event.token_id == -1, event
                vectors[event.request_id] = event.embedding
        assert set(vectors) == set(ids)  # each pooled request ends with its one step, with its vector
        for rid, prompt in zip(ids, prompts, strict=True):
            got = vectors[rid]
            assert len(got) == engine.model_info.pooling.dimension
            if engine.config.dtype == "float32":
                want = transformers_last_hidden_state(tiny_llama, prompt)
                assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-3
            else:  # rounded activations: finite values
                assert all(abs(x) < float("inf") for x in got)

    def test_token_embeddings_match_transformers_or_are_refused(
        self, engine_backend, tiny_llama, batches_checked
    ):
        from tgi.core.config import ConfigError
        from tgi.core.request import ValidationError
        from tgi.core.sampling_params import SamplingParams
        from tgi.core.testing.model import transformers_hidden_states

        try:
            engine = self.make_engine(engine_backend, tiny_llama, batches_checked, runner="pooling")
        except ConfigError as exc:  # `test_pooling_matches_transformers_or_is_refused` checks the refusal
            assert "cannot pool" in str(exc), exc
            return
        params = SamplingParams(max_new_tokens=1)
        prompts = [list(p) for p in PROMPTS if len(p) <= engine.config.max_batch_prefill_tokens]
        if not engine.runner.capabilities().token_embeddings:  # refused by name, before it is queued
            with pytest.raises(ValidationError, match="token embeddings"):
                engine.validate(prompts[0], params, pooling=True, token_embeddings=True)
            return
        # token embeddings beside pooled vectors in the same steps: each request gets what it asked
        asks = [i % 2 == 0 for i in range(len(prompts))]
        ids = [
            engine.add_validated_request(engine.validate(p, params, pooling=True, token_embeddings=tokens))
            for p, tokens in zip(prompts, asks, strict=True)
        ]
        events = {}
        while engine.has_unfinished():
            for event in engine.step():
                assert event.finish_reason is not None and event.token_id == -1, event
                events[event.request_id] = event
        assert set(events) == set(ids)
        for rid, prompt, tokens in zip(ids, prompts, asks, strict=True):
            event = events[rid]
            if not tokens:
                assert event.token_embeddings is None and event.embedding is not None
                continue
            assert event.embedding is None and len(event.token_embeddings) == len(prompt)
            assert {len(t) for t in event.token_embeddings} == {engine.model_info.pooling.dimension}
            if engine.config.dtype == "float32":
                want = transformers_hidden_states(tiny_llama, prompt)
                pairs = zip(event.token_embeddings, want, strict=True)
                assert max(abs(a - b) for t, w in pairs for a, b in zip(t, w, strict=True)) < 1e-3
