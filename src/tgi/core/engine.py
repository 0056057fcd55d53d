"""The engine: one model on one backend, a scheduler, and the per-request output pipeline.

`LLMEngine` is synchronous and single-threaded: `add_request`, then `step()` until done. It is what the
in-process Python API and `AsyncEngine` (the server's engine, in `tgi.core.async_engine`) drive.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable

from tgi.core.block_hash import request_cache_key
from tgi.core.block_manager import BlockManager
from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine_startup import choose_proposer, start_engine, start_kv_events
from tgi.core.engine_stats import EngineStats
from tgi.core.guided.compiler import CompiledGrammar, GrammarCompiler
from tgi.core.guided.decoding import GuidedDecoding
from tgi.core.guided.grammar import Grammar, GrammarError
from tgi.core.interfaces import Backend, ModelInfo, ModelRunner
from tgi.core.interfaces.batch import StepOutput
from tgi.core.lora.served_adapters import ServedAdapters
from tgi.core.output import RequestOutput
from tgi.core.request import (
    EngineRequest,
    FinishReason,
    GenerationResult,
    ImageInput,
    StepError,
    TokenEvent,
    UnusableGrammarError,
    ValidationError,
)
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler
from tgi.core.sequence import Sequence
from tgi.core.speculative import Proposer
from tgi.core.speculative.drafts import Drafts
from tgi.core.step_overlap import StepOverlap
from tgi.core.tokenization import eos_token_ids
from tgi.core.validation import (
    RequestLimits,
    check_atomic_images,
    check_image_budget,
    check_image_spans,
    check_images,
    check_pooling,
    check_prediction,
    check_runner_features,
    check_token_masks,
    validate_request,
)

log = logging.getLogger(__name__)


class LLMEngine:
    """Loads a model and generates for many requests at once with continuous batching.

    >>> engine = LLMEngine.from_config(EngineConfig(max_batch_total_tokens=16384))
    >>> [result] = engine.generate(["The capital of France is"], SamplingParams(max_new_tokens=8))
    >>> result.generated_text
    """

    def __init__(
        self,
        backend: Backend,
        runner: ModelRunner,
        tokenizer,
        config: EngineConfig,
        info: ModelInfo,
        proposer: Proposer | None = None,
    ):
        self.backend = backend
        self.runner = runner
        self.tokenizer = tokenizer
        self.config = config
        self.model_info = info
        limits = (config.max_input_tokens, config.max_total_tokens, info.vocab_size, info.lora_adapters)
        self.limits = RequestLimits(*limits, config.logits_processors)
        if config.deterministic and not runner.capabilities().batch_invariant:
            raise ConfigError(
                f"--deterministic: the {backend.name} backend's runner is not batch-invariant (its kernels' "
                "results for a request depend on the other requests of a step)"
            )
        constraints = runner.constraints()
        if config.prefix_caching and not constraints.chunked_prefill:
            log.warning("prefix caching is off: this runner cannot prefill from the middle of a prompt")
            config = self.config = dataclasses.replace(config, prefix_caching=False)
        self.block_manager = BlockManager(
            config.max_batch_total_tokens // config.block_size,
            config.block_size,
            prefix_caching=config.prefix_caching,
            namespace=f"{config.model_id}@{config.revision}:{info.dtype}".encode(),
        )
        self.scheduler = Scheduler.from_config(config, self.block_manager, constraints)
        # the model's eos ids, the tokenizer's, and the chat template's end-of-turn token
        self.eos_token_ids = frozenset(info.eos_token_ids) | frozenset(eos_token_ids(tokenizer))
        self._outputs: dict[str, RequestOutput] = {}
        # the seeds of requests that give none
        self._rng = random.SystemRandom() if config.seed is None else random.Random(config.seed)
        self.num_batch_tokens = 0
        self.num_prefill_tokens = 0
        self.step_seconds = 0.0  # in `runner.execute`, since start (`EngineStats`)
        self.encoder_seconds = 0.0  # of which in the vision encoder
        self.guided = GuidedDecoding(info.vocab_size)
        self.proposer = choose_proposer(config, runner, constraints) if proposer is None else proposer
        self.drafts = Drafts(self.proposer, config.speculate)  # the launch's guesses, and each prediction's
        # compiles nothing until a grammar comes (llguidance is imported then)
        self._grammars = GrammarCompiler(tokenizer, info.vocab_size, self.eos_token_ids)
        # the LoRA adapters requests may name, loaded and unloaded at run time, and their prefix-cache keys
        self.lora = ServedAdapters(self, info.lora_adapters)
        # the prefix cache's changes published for routers (--kv-events-config), None without
        self.kv_events = start_kv_events(config, self.block_manager, self.lora)
        # steps one after another, or each started before the last is settled (the runner's async_steps)
        self.steps = StepOverlap(
            self, config.async_scheduling and runner.capabilities().async_steps and self.proposer is None
        )
        if config.async_scheduling and not self.steps.overlapping:  # asked for (the default), said why not
            why = (
                "speculation guesses from each step's tokens"
                if self.proposer is not None
                else f"the {backend.name} backend's runner waits for each step (no asynchronous device)"
            )
            log.info("steps are not overlapped (--async-scheduling): %s", why)

    @classmethod
    def from_config(
        cls, config: EngineConfig, registry=None, progress: Callable[[str], None] | None = None
    ) -> LLMEngine:
        """Select the backend, resolve and load the model, size the KV cache, warm up
        (`tgi.core.engine_startup.start_engine`)."""
        parts = start_engine(config, registry, progress)
        return cls(parts.backend, parts.runner, parts.tokenizer, parts.config, parts.info, parts.proposer)

    # -- requests ---------------------------------------------------------------------------------------
    def validate(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        images: Iterable[ImageInput] = (),
        prediction: Iterable[int] = (),
        pooling: bool = False,
        token_embeddings: bool = False,
    ) -> EngineRequest:
        """The request's one validation: what the engine queues (`add_validated_request`), with `params`'
        defaults resolved and its grammar compiled (`compile_grammar`), or `ValidationError` (TGI's 422)
        for a request that does not fit the limits or asks for what this backend cannot do
        (`tgi.core.validation` holds every check), or `CompilerBusyError`. Thread-safe; with a grammar it
        may take seconds: never call it on the engine thread (the server calls it off its event loop).
        `images`: the prompt's images (`ImageInput`, placeholders already in `prompt_token_ids`), refused by
        name unless the runner runs a vision tower (`RunnerCapabilities.image_inputs`). `prediction`: token ids
        of the output the request expects (OpenAI's Predicted Outputs: guesses, never a change of the output),
        refused by name where the runner cannot verify guesses. `pooling`: pool the prompt (embeddings) instead
        of generating; each kind only on a model that serves it (`ModelInfo.pooling`); with
        `token_embeddings`, every token's final hidden state instead of the pooled vector (an embedder's, on a
        runner whose capabilities say `token_embeddings`)."""
        images, prediction = tuple(images), tuple(prediction)
        capabilities, backend = self.runner.capabilities(), self._backend_name()
        check_pooling(pooling, self.model_info, params, token_embeddings, capabilities, backend)
        check_images(images, capabilities, self._backend_name(), self.model_info.architecture)
        check_runner_features(params, capabilities, self._backend_name())
        params = validate_request(prompt_token_ids, params, self.limits)
        check_image_spans(images, len(prompt_token_ids))
        check_image_budget(images, self.config.max_encoder_tokens_per_step)
        check_atomic_images(images, self.scheduler.chunks.atomic_image_limit)
        check_prediction(prediction, capabilities, self.scheduler.constraints, self.limits, backend)
        grammar = None if params.grammar is None else self.compile_grammar(params.grammar)
        return EngineRequest(
            tuple(prompt_token_ids), params, grammar, images, prediction=prediction, pooling=pooling,
            token_embeddings=token_embeddings,
        )  # fmt: skip

    def _backend_name(self) -> str:
        return getattr(getattr(self.backend, "spec", None), "name", type(self.backend).__name__)

    def compile_grammar(self, grammar: Grammar) -> CompiledGrammar:
        """The grammar compiled against this model's tokenizer (cached by grammar), or
        `UnusableGrammarError` saying why it cannot constrain this model's output, or `CompilerBusyError`
        when it cannot be compiled now. Thread-safe; it may take seconds: never call it on an event loop or
        the engine thread. The only caller of the grammar compiler (`validate` calls it)."""
        check_token_masks(self.runner.capabilities(), self._backend_name())
        try:
            return self._grammars.compile(grammar)
        except GrammarError as exc:
            raise UnusableGrammarError(str(exc)) from None

    def add_request(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> str:
        """Validate (compiling its grammar on the caller's thread: the in-process API) and queue a request;
        returns its id. `validate` then `add_validated_request`."""
        return self.add_validated_request(self.validate(prompt_token_ids, params), request_id)

    def add_validated_request(self, request: EngineRequest, request_id: str | None = None) -> str:
        """Queue a request as `validate` made it, without checking it again; never compiles (the engine
        thread of `AsyncEngine` adds what the event loop's caller validated). Returns its id."""
        params = request.params
        request_id = request_id or uuid.uuid4().hex
        seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
        # a LoRA adapter changes the keys/values: its blocks are cached apart from the base model's (and from
        # those of an earlier adapter of the same id); a tenant's and a salt's are cached apart from the others'
        adapter = b"" if params.adapter_id is None else self.lora.cache_key(params.adapter_id)
        cache_key = request_cache_key(adapter, request.tenant, request.cache_salt)
        if request.images and not self.runner.capabilities().image_inputs:  # not through `validate`
            raise ValidationError(
                f"the model {self.model_info.architecture} on the {self._backend_name()} backend does not "
                "take image inputs"
            )
        seq = Sequence.of_request(request_id, request, seed, cache_key)
        if request.grammar is not None:
            self.guided.start(request_id, request.grammar)
        if request.prediction:
            self.drafts.start_prediction(request_id, seq.num_prompt_tokens, request.prediction)
        self._outputs[request_id] = RequestOutput(seq, self.tokenizer, self.eos_token_ids)
        self.scheduler.add(seq)
        return request_id

    def abort(self, request_id: str) -> bool:
        """Cancel a request; its KV blocks are free when this returns."""
        self._release(request_id)
        return self.scheduler.abort(request_id)

    def reset_prefix_cache(self) -> int:
        """Empty the prefix cache between steps (KV events: `AllBlocksCleared` at once); the blocks dropped."""
        dropped = self.block_manager.reset_prefix_cache()
        if self.kv_events is not None:
            self.kv_events.end_step()
        return dropped

    def _release(self, request_id: str) -> None:
        """Forget a request that ends (finished or aborted): its output pipeline, grammar state and guesses;
        the scheduler frees its blocks."""
        self._outputs.pop(request_id, None)
        self.guided.drop(request_id)
        self.drafts.drop(request_id)

    def abort_all(self) -> list[str]:
        """Cancel every request in flight (after a failed step); returns their ids."""
        self.steps.drop_in_flight()
        ids = list(self._outputs)
        for request_id in ids:
            self.abort(request_id)
        return ids

    def close(self) -> None:
        """Release the model once no step runs any more (a model swapped out): every request still in flight
        is aborted, the runner shuts down (weights, KV cache, worker processes), the draft model's too, and
        the backend hands the freed memory back (`Backend.release_memory`). The engine cannot step again."""
        self.abort_all()
        if self.kv_events is not None:
            self.kv_events.close()
        self.runner.shutdown()
        draft = getattr(self.proposer, "runner", None)  # --speculative-model's runner
        if draft is not None:
            draft.shutdown()
        self.backend.release_memory()

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or self.steps.in_flight is not None

    def stats(self) -> EngineStats:
        return EngineStats(
            num_waiting=self.scheduler.num_waiting,
            num_running=self.scheduler.num_running,
            num_batch_tokens=self.num_batch_tokens,
            num_free_blocks=self.block_manager.num_free_blocks,
            num_total_blocks=self.block_manager.num_blocks,
            block_size=self.block_manager.block_size,
            num_preemptions=self.scheduler.num_preemptions,
            num_prefill_tokens=self.num_prefill_tokens,
            prefix_caching=self.block_manager.prefix_caching,
            num_prefix_cache_hit_tokens=self.scheduler.num_cache_hit_tokens,
            num_prefix_cache_miss_tokens=self.scheduler.num_cache_miss_tokens,
            num_draft_tokens=self.scheduler.num_draft_tokens,
            num_accepted_draft_tokens=self.scheduler.num_accepted_draft_tokens,
            step_seconds=self.step_seconds,
            encoder_seconds=self.encoder_seconds,
        )

    # -- the step ---------------------------------------------------------------------------------------
    def step(self) -> list[TokenEvent]:
        """Schedule, run the model, sample, and turn new tokens into events (finishing sequences that
        stop). Returns the events of this step, in batch order; with overlapped steps
        (`--async-scheduling`), those of the step before, settled while this one runs on the device."""
        if self.drafts.active:
            self.drafts.propose(self.scheduler.running, self.guided)
        batch = self.scheduler.schedule()
        self.num_batch_tokens = batch.num_tokens
        self.num_prefill_tokens += batch.num_prefill_tokens
        try:
            if batch.is_empty:
                return self.steps.settle_in_flight()
            if self.steps.overlapping:
                return self.steps.run_overlapped(batch)
            return self._run_step(batch)
        except Exception as exc:
            if getattr(exc, "fatal", False):  # e.g. a tensor-parallel rank died: no step can run
                raise
            raise StepError([s.request_id for s in batch.sequences] + self.steps.drop_in_flight()) from exc
        finally:
            if self.kv_events is not None:  # the step's changes of the prefix cache, as one batch
                self.kv_events.end_step()

    def _run_step(self, batch) -> list[TokenEvent]:
        self.prepare_step(batch)
        started = time.perf_counter()
        output: StepOutput = self.runner.execute(batch)
        self.step_seconds += time.perf_counter() - started
        return self.emit(batch, output, self.scheduler.update(batch, output))

    def prepare_step(self, batch) -> None:
        """Before a batch runs: its requests' first-scheduled times, its grammar masks."""
        now = time.monotonic()
        for s in batch.sequences:
            out = self._outputs.get(s.request_id)
            if out is not None and out.first_scheduled is None:
                out.first_scheduled = now
        if len(self.guided):
            batch.token_masks = self.guided.masks([s for s in batch.sequences if s.sample])

    def emit(self, batch, output: StepOutput, new_tokens: list[Sequence]) -> list[TokenEvent]:
        """A step's results as events: prompt logprobs kept, each new token through its request's output
        pipeline, sequences that stop finished and released. `new_tokens`: the scheduler's `update` (or
        `settle`) of `output`."""
        self.encoder_seconds += output.encoder_seconds
        pooled = {**output.pooled, **output.token_embeddings}  # a vector, or a token-embeddings request's
        events = [self._pooled(rid, result) for rid, result in pooled.items() if rid in self._outputs]
        for request_id in output.prompt_logprobs:
            if request_id in self._outputs:
                self._outputs[request_id].add_prompt_logprobs(output)
        for seq in new_tokens:
            out = self._outputs[seq.request_id]
            for i in seq.new_token_rows:
                tops = None
                if output.top_token_ids is not None and seq.params.top_n_tokens:
                    n = seq.params.top_n_tokens
                    tops = (output.top_token_ids[i][:n], output.top_logprobs[i][:n])
                event = out.on_token(output.token_ids[i], output.logprobs[i], tops)
                if event.finish_reason is not None:
                    event = self._final(seq, event)
                events.append(event)
                if event.finish_reason is not None:  # tokens accepted past a stop are dropped
                    self.scheduler.finish(seq.request_id, event.finish_reason)
                    self._release(seq.request_id)
                    break
                self.guided.advance(seq.request_id, output.token_ids[i])
            else:
                if output.guesses is not None and self.proposer is not None:
                    # the runner's guesses at the tokens after the last one drawn, for the next step
                    guesses = output.guesses[seq.new_token_rows[-1]]
                    self.proposer.observe_runner_guesses(seq.request_id, seq.num_tokens, guesses)
        return events

    def _pooled(self, request_id: str, result: list) -> TokenEvent:
        """A pooling request's one event; the request ends with it (no KV kept past its step)."""
        event = self._outputs[request_id].on_pooled(result)
        self.scheduler.finish(request_id, event.finish_reason)
        self._release(request_id)
        return event

    def _final(self, seq: Sequence, event: TokenEvent) -> TokenEvent:
        """A request's last event with what speculation did for it: tokens accepted from guesses, and its
        prediction's accepted and rejected tokens where it gave one."""
        accepted, rejected = self.drafts.predicted_counts(seq, event.index + 1) or (0, 0)
        return dataclasses.replace(
            event,
            num_skipped_tokens=seq.num_accepted_drafts,
            num_accepted_prediction_tokens=accepted,
            num_rejected_prediction_tokens=rejected,
        )

    # -- the in-process Python API ---------------------------------------------------------------------
    def generate(
        self,
        prompts: str | Iterable[str | list[int]],
        params: SamplingParams | list[SamplingParams] | None = None,
    ) -> list[GenerationResult]:
        """Generate for every prompt (text, or token ids) at once; results in prompt order. `params`: one
        for every prompt, or a list with one per prompt (e.g. each its own LoRA adapter)."""
        if isinstance(prompts, str):
            prompts = [prompts]
        ids = [p if isinstance(p, list) else self.tokenizer.encode(p) for p in prompts]
        if params is None or isinstance(params, SamplingParams):
            params = [params or SamplingParams()] * len(ids)
        elif len(params) != len(ids):
            raise ValueError(f"{len(params)} sampling params for {len(ids)} prompts")
        order = [self.add_request(p, pp) for p, pp in zip(ids, params, strict=True)]
        results = {rid: GenerationResult(rid, "", [], FinishReason.LENGTH) for rid in order}
        while self.has_unfinished():
            for event in self.step():
                results[event.request_id].add(event)
        return [results[rid] for rid in order]
