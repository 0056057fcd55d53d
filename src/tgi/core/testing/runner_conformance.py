"""The runner-level conformance suite: what every backend must do through a real engine, whatever its
framework (torch, JAX, a vendor's compiler). It talks to the backend through `Backend` and `ModelRunner`
only, and imports no framework itself (the reference tokens come from `transformers`).

On a small random-weight Llama (`model.write_tiny_llama`), loaded through `LLMEngine` and the plugin host:

* `test_quantized_kv_cache_is_close_or_refused`: each quantized `--kv-cache-dtype` (int8, fp8_e4m3fn,
  fp8_e5m2) is refused at start with a `ConfigError` naming the flag where `Backend.kv_cache_dtypes` does not
  list it, and otherwise gives, teacher-forced over the prompt (prefilled in chunks) and its decodes, the
  unquantized cache's top tokens and logprobs within the tolerances `kv_cache_conformance` states;
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
* `test_prompt_top_logprobs_match_transformers_or_are_refused`: a runner whose `capabilities()` say
  `prompt_top_logprobs` (vLLM's `prompt_logprobs=k`) returns with them each prompt token's rank and the k
  most likely tokens at its position, most likely first, the same as `transformers`' (float32 engines); one
  that does not has such requests refused by name;
* `test_lora_adapters_at_run_time_or_refused`: a runner whose `capabilities()` say `lora_runtime_loading`
  loads a `peft` adapter into a running engine (`LLMEngine.lora.load`): its requests (two short prompts),
  batched with one of the base model, give transformers + peft's greedy tokens (float32 engines), and once it is unloaded the base
  model's tokens come back; one that does not has the load refused by name;
* `test_deterministic_mode_is_batch_invariant_or_refused`: an engine asked for `deterministic` either is
  refused at start with a `ConfigError` naming `--deterministic`, or runs a runner whose `capabilities()`
  say `batch_invariant`, and then a greedy and a seeded sampled request give the same tokens alone, beside
  7 other requests of other lengths (prefills chunked differently; `deterministic_crowd`), continued from
  the prefix cache, and after a preemption (beside 4 others);
* `test_overlapped_steps_give_the_tokens_of_waited_ones`: a runner whose `capabilities()` say `async_steps`
  (`execute_async`, decodes fed `PENDING_TOKEN`) gives, with steps overlapped, the tokens and finish reasons of
  the same engine with every step waited for (greedy, a request that stops early, seeded sampling, a
  penalty whose steps are waited for), and at least one step did overlap; one that does not is never
  overlapped;
* `test_pooling_matches_transformers_or_is_refused`: a runner whose `capabilities()` say `pooling` runs the
  Llama as a pooling model (`--runner pooling`: last-token pooling): each prompt that fits one prefill step,
  queued at once, is one
  prefill-only step that ends its request with the pooled vector (`StepOutput.pooled`), equal to
  `transformers`' final hidden state of its last token (float32 engines); one that does not is refused at
  start with a `ConfigError` that says it cannot pool;
* `test_token_embeddings_match_transformers_or_are_refused`: a pooling runner whose `capabilities()` say
  `token_embeddings` returns, for a request that asks for them (`StepOutput.token_embeddings`), the final
  hidden state of every token of its prompt, equal to `transformers`' (float32 engines), beside pooled
  requests of the same steps that get their vectors; one that does not says so at validation, by name;
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
prefills sets it to 64, so that the longest prompt fits one step), `max_new_tokens` (8; fewer where a step is
slow), `deterministic_crowd` (7; fewer where a step is slow), `engine_block_size()`.
"""

from __future__ import annotations

import dataclasses

from tgi.core.testing.capability_conformance import CapabilityChecks
from tgi.core.testing.generation_conformance import GenerationChecks
from tgi.core.testing.kv_cache_conformance import KVCacheChecks
from tgi.core.testing.model import PROMPTS


class RunnerConformance(CapabilityChecks, GenerationChecks, KVCacheChecks):
    """Subclass as `Test<Name>...` and provide `make_backend()` or `backend_name`. The checks run in the
    order the module docstring lists them: pytest collects a base class's tests first (the KV cache check,
    the generation checks, then the capability checks), and the constraints check comes last, after the
    batches of the others."""

    def test_runner_constraints_are_honoured(self, engine_backend, tiny_llama, batches_checked):
        """Checks the batches of the tests above (run them with this one), and of a busy run of its own."""
        engine = self.make_engine(engine_backend, tiny_llama, batches_checked, max_num_seqs=4)
        many = [list(p) for p in PROMPTS] * 3
        engine.generate(many, dataclasses.replace(self._params(), max_new_tokens=4))
        assert batches_checked["count"] > 0
        assert not batches_checked["violations"], batches_checked["violations"][:5]
