"""The runner-level conformance suite: what every backend must do through a real engine, whatever its
framework (torch, JAX, a vendor's compiler). It talks to the backend through `Backend` and `ModelRunner`
only, and imports no framework itself (the reference tokens come from `transformers`).

On a small random-weight Llama (`model.write_tiny_llama`), loaded through `LLMEngine` and the plugin host:

* `test_greedy_generation_matches_transformers`: three prompts generated together (continuous batching,
  a 45-token prompt prefilled in chunks) give the greedy tokens `transformers` computes from the same
  checkpoint, each prompt on its own;
* `test_preemption_keeps_the_tokens`: with a KV cache too small for all of them at once, sequences are
  preempted and recomputed, and the tokens stay the same; every block is free at the end;
* `test_cancellation_frees_blocks_and_spares_the_others`: a request cancelled while running and one
  cancelled while queued produce no further token and give their blocks back; the others' tokens do not
  change;
* `test_grammar_masks_are_honoured`: a runner whose `capabilities()` say `token_masks` samples, for each
  masked row of a step, only tokens its mask allows (greedy and seeded rows), and leaves unmasked rows as
  they are; one that does not has grammar requests refused by name;
* `test_prompt_logprobs_match_transformers_or_are_refused`: a runner whose `capabilities()` say
  `prompt_logprobs` returns, for a prompt prefilled in chunks, the logprob of every prompt token but the
  first, equal to `transformers`' (float32 engines); one that does not has such requests refused by name;
* `test_lora_adapters_at_run_time_or_refused`: a runner whose `capabilities()` say `lora_runtime_loading`
  loads a `peft` adapter into a running engine (`LLMEngine.lora.load`): its requests (two short prompts),
  batched with one of the base model, give transformers + peft's greedy tokens (float32 engines), and once it is unloaded the base
  model's tokens come back; one that does not has the load refused by name;
* `test_deterministic_mode_is_batch_invariant_or_refused`: an engine asked for `deterministic` either is
  refused at start with a `ConfigError` naming `--deterministic`, or runs a runner whose `capabilities()`
  say `batch_invariant`, and then a greedy and a seeded sampled request give the same tokens alone, beside
  1 and 7 other requests of other lengths (prefills chunked differently), continued from the prefix cache,
  and after a preemption;
* `test_runner_constraints_are_honoured`: every batch the engine hands the runner, in all the tests above,
  fits what the runner's `constraints()` declare (batch size, tokens per step, mixed batches, chunked
  prefill, prefill buckets, block size).

Use (a test module of the backend's package; torch backends get it with `TorchBackendConformance`)::

    from tgi.core.testing import RunnerConformance

    class TestMyChipRunner(RunnerConformance):
        def make_backend(self):
            from tgi_mychip.backend import MyChipBackend
            return MyChipBackend()

Knobs (class attributes): `generation_dtype`, `max_batch_prefill_tokens` (a runner that cannot chunk
prefills sets it to 64, so that the longest prompt fits one step), `engine_block_size()`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from tgi.core.interfaces import Backend, RunnerConstraints
from tgi.core.interfaces.batch import ScheduledBatch
from tgi.core.testing.model import PROMPTS, backend_registry, write_tiny_llama

#: the reference's length: every request generates this many tokens (EOS ignored)
MAX_NEW_TOKENS = 8
_REFERENCE: dict[str, list[list[int]]] = {}  # transformers' greedy tokens, by checkpoint


def constraint_violations(
    batch: ScheduledBatch, constraints: RunnerConstraints, block_size: int
) -> list[str]:
    """What in `batch` breaks `constraints` (empty when it fits)."""
    found = []
    seqs = batch.sequences
    if constraints.max_batch_size is not None and len(seqs) > constraints.max_batch_size:
        found.append(f"{len(seqs)} sequences > max_batch_size {constraints.max_batch_size}")
    prefills = [s for s in seqs if s.is_prefill]
    if not constraints.mixed_batches and prefills and len(prefills) < len(seqs):
        found.append("prefill chunks and decode tokens in one step (mixed_batches=False)")
    for s in prefills:
        whole = s.start_pos == 0 and len(s.token_ids) == len(s.all_token_ids)
        if not constraints.chunked_prefill and not whole:
            found.append(
                f"{s.request_id}: a prefill chunk of {len(s.token_ids)} tokens (chunked_prefill=False)"
            )
        if constraints.prefill_buckets and len(s.token_ids) > max(constraints.prefill_buckets):
            found.append(
                f"{s.request_id}: a {len(s.token_ids)}-token chunk beyond the largest prefill bucket"
            )
    if constraints.max_batch_tokens is not None and batch.num_tokens > constraints.max_batch_tokens:
        found.append(f"{batch.num_tokens} tokens > max_batch_tokens {constraints.max_batch_tokens}")
    bound = constraints.max_padded_prefill_tokens
    if bound is not None and prefills:
        area = constraints.padded_prefill_tokens(len(prefills), max(len(s.token_ids) for s in prefills))
        if area is None or area > bound:
            found.append(
                f"{len(prefills)} prefill rows pad to {area} tokens > max_padded_prefill_tokens {bound}"
            )
    if constraints.block_size is not None and constraints.block_size != block_size:
        found.append(f"block size {block_size}, the runner needs {constraints.block_size}")
    return found


class RunnerConformance:
    """Subclass as `Test<Name>...` and provide `make_backend()` or `backend_name`."""

    #: build the backend through the plugin host by this name (when `make_backend` is not overridden)
    backend_name: ClassVar[str | None] = None
    #: dtype of the engine (default: float32 when supported, else the backend's default)
    generation_dtype: ClassVar[str | None] = None
    #: the engine's step budget: 32 prefills the 45-token prompt in two chunks (64 for runners that cannot)
    max_batch_prefill_tokens: ClassVar[int] = 32

    def make_backend(self) -> Backend:
        if self.backend_name is None:
            raise NotImplementedError("set `backend_name` or override `make_backend()`")
        from tgi.core.plugins import BackendRegistry

        return BackendRegistry(allow=[self.backend_name]).select(self.backend_name).create()

    def engine_block_size(self, backend: Backend) -> int:
        """The KV block size of the engines the suite builds (16 unless the backend needs another)."""
        return 16

    # -- fixtures ---------------------------------------------------------------------------------------
    @pytest.fixture(scope="class")
    @classmethod
    def engine_backend(cls) -> Backend:
        """The backend the suite's engines run on: an instance of its own, so that nothing the engines
        leave in it (workspaces made under the engine's inference mode) meets other tests of the class."""
        return cls().make_backend()

    @pytest.fixture(scope="class")
    @classmethod
    def tiny_llama(cls, tmp_path_factory):
        path = tmp_path_factory.getbasetemp() / "tgi-conformance-tiny-llama"  # shared by every backend
        return path if (path / "config.json").exists() else write_tiny_llama(path)

    @pytest.fixture(scope="class")
    @classmethod
    def batches_checked(cls) -> dict[str, Any]:
        """Every batch the suite's engines ran, checked against their runner's constraints."""
        return {"count": 0, "violations": []}

    @pytest.fixture
    def reference(self, tiny_llama) -> list[list[int]]:
        """`transformers`' greedy tokens for `PROMPTS` (computed once per session)."""
        from tgi.core.testing.model import transformers_greedy

        key = str(tiny_llama)
        if key not in _REFERENCE:
            _REFERENCE[key] = transformers_greedy(tiny_llama, PROMPTS, MAX_NEW_TOKENS)
        return _REFERENCE[key]

    def make_engine(self, backend: Backend, model_path, checked: dict[str, Any], **limits: Any):
        """An `LLMEngine` on `backend` (through the plugin host) whose runner checks every batch against
        its constraints into `checked`."""
        from tgi.core.config import EngineConfig
        from tgi.core.engine import LLMEngine

        dtype = self.generation_dtype or (
            "float32" if "float32" in backend.supported_dtypes() else backend.default_dtype()
        )
        settings = dict(
            model_id=str(model_path), backend=backend.name, dtype=dtype,
            block_size=self.engine_block_size(backend), max_total_tokens=128, max_batch_total_tokens=1024,
            max_batch_prefill_tokens=self.max_batch_prefill_tokens, max_num_seqs=8,
        )  # fmt: skip
        config = EngineConfig(**{**settings, **limits})
        engine = LLMEngine.from_config(config, registry=backend_registry(backend.name, lambda: backend))
        constraints, block_size = engine.runner.constraints(), engine.config.block_size
        execute: Callable = engine.runner.execute

        def checked_execute(batch: ScheduledBatch):
            checked["count"] += 1
            checked["violations"] += constraint_violations(batch, constraints, block_size)
            return execute(batch)

        engine.runner.execute = checked_execute  # the instance's, for this engine only
        return engine

    @staticmethod
    def _params():
        from tgi.core.sampling_params import SamplingParams

        return SamplingParams(max_new_tokens=MAX_NEW_TOKENS, ignore_eos=True)

    @staticmethod
    def _assert_all_blocks_free(engine) -> None:
        bm = engine.block_manager
        assert not engine.has_unfinished()
        assert bm.num_free_blocks == bm.num_blocks, f"{bm.num_blocks - bm.num_free_blocks} blocks still held"
        bm.check_invariants()

    # -- the checks -------------------------------------------------------------------------------------
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
        assert len(tokens[victim]) == cancelled_at < MAX_NEW_TOKENS and tokens[queued] == []
        spared = [i for i, rid in enumerate(ids) if rid != victim]
        assert [tokens[ids[i]] for i in spared] == [reference[i] for i in spared]
        self._assert_all_blocks_free(engine)

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
                SamplingParams(max_new_tokens=MAX_NEW_TOKENS, ignore_eos=True, adapter_id=a)
                for _, a in requests
            ],
        )
        tokens = [r.token_ids for r in results]
        if engine.config.dtype == "float32":
            assert tokens[:-1] == peft_greedy(tiny_llama, adapter, short, MAX_NEW_TOKENS)
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
            max_new_tokens=MAX_NEW_TOKENS, ignore_eos=True, do_sample=True, seed=1234, temperature=0.8,
            top_k=20, top_p=0.9,
        )  # fmt: skip
        others = [list(PROMPTS[1]), list(PROMPTS[2]), list(PROMPTS[0][:30]), [9, 8, 7]] * 2
        alone = [engine.generate([target], p)[0].token_ids for p in (greedy, seeded)]

        def targets_beside(engine, crowd: list[list[int]]) -> list[list[int]]:
            results = engine.generate([*crowd, target, target], [greedy] * len(crowd) + [greedy, seeded])
            return [r.token_ids for r in results[-2:]]

        for n in (1, 7):
            assert targets_beside(engine, others[:n]) == alone, f"beside {n} other requests"
        cached = self.make_engine(
            backend, tiny_llama, batches_checked, **{**settings, "prefix_caching": True}
        )
        if cached.config.prefix_caching:
            cached.generate([target], greedy)  # its full blocks stay cached
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

    def test_runner_constraints_are_honoured(self, engine_backend, tiny_llama, batches_checked):
        """Checks the batches of the tests above (run them with this one), and of a busy run of its own."""
        engine = self.make_engine(engine_backend, tiny_llama, batches_checked, max_num_seqs=4)
        many = [list(p) for p in PROMPTS] * 3
        engine.generate(many, dataclasses.replace(self._params(), max_new_tokens=4))
        assert batches_checked["count"] > 0
        assert not batches_checked["violations"], batches_checked["violations"][:5]
