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
from dataclasses import dataclass

from tgi.core.block_manager import BlockManager
from tgi.core.config import ConfigError, EngineConfig
from tgi.core.guided.compiler import CompiledGrammar, GrammarCompiler
from tgi.core.guided.decoding import GuidedDecoding
from tgi.core.guided.grammar import Grammar, GrammarError
from tgi.core.interfaces import Backend, ModelInfo, ModelRunner, UnsupportedError
from tgi.core.interfaces.batch import StepOutput
from tgi.core.lora.served_adapters import ServedAdapters
from tgi.core.output import RequestOutput
from tgi.core.request import FinishReason, GenerationResult, StepError, TokenEvent, ValidationError
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler
from tgi.core.sequence import Sequence
from tgi.core.speculative import MedusaProposer, NgramProposer, Proposer
from tgi.core.tokenization import eos_token_ids
from tgi.core.validation import RequestLimits, validate_request

log = logging.getLogger(__name__)

#: default step token budget cap: a longer prompt is chunked over steps so running decodes keep going
DEFAULT_MAX_BATCH_PREFILL_TOKENS = 2048


@dataclass(frozen=True)
class EngineStats:
    """A snapshot for metrics and `/info`."""

    num_waiting: int
    num_running: int
    num_batch_tokens: int  # tokens in the last executed step
    num_free_blocks: int
    num_total_blocks: int
    block_size: int
    num_preemptions: int
    num_prefill_tokens: int  # prompt tokens run through the model since start (chunks and recomputation)
    prefix_caching: bool = False  # whether KV blocks of prompts already seen are reused
    # tokens of admitted sequences read from the prefix cache / computed, since start (re-admissions after
    # preemption included)
    num_prefix_cache_hit_tokens: int = 0
    num_prefix_cache_miss_tokens: int = 0
    # speculative decoding: guesses verified and accepted, since start
    num_draft_tokens: int = 0
    num_accepted_draft_tokens: int = 0


def derive_limits(
    config: EngineConfig, info: ModelInfo, runner: ModelRunner, backend: Backend
) -> EngineConfig:
    """Fill in the limits the user left unset, from the model and the device's free memory, as TGI does,
    and check that they agree with each other. Returns a new config with no `None` limit left."""
    context = info.max_position_embeddings
    max_total = config.max_total_tokens or context
    if max_total > context:
        raise ConfigError(
            f"--max-total-tokens ({max_total}) exceeds the model's context length ({context} positions)"
        )
    max_input = config.max_input_tokens or max_total - 1
    prefill = config.max_batch_prefill_tokens or min(max_input + 50, DEFAULT_MAX_BATCH_PREFILL_TOKENS)
    spec = runner.kv_cache_spec()
    bs = config.block_size
    if config.max_batch_total_tokens is not None:
        num_blocks = -(-config.max_batch_total_tokens // bs)
    else:
        # the runner's view where it has one (several devices: the least free), else the backend's
        memory = runner.memory_info() or backend.memory_info()
        # --cuda-memory-fraction: what is used already counts against the share of the total allowed
        allowed = memory.free - memory.total * (1.0 - config.memory_fraction)
        free = max(allowed, 0) * config.kv_cache_memory_fraction
        # never more than every running sequence at full length could use
        num_blocks = int(min(free // spec.bytes_per_block, config.max_num_seqs * -(-max_total // bs)))
    if num_blocks * bs < max_total:
        raise ConfigError(
            f"the KV cache holds {num_blocks * bs} tokens ({num_blocks} blocks of {bs}), less than "
            f"--max-total-tokens ({max_total}): lower --max-total-tokens or free memory"
        )
    return dataclasses.replace(
        config,
        dtype=info.dtype,
        max_total_tokens=max_total,
        max_input_tokens=max_input,
        max_batch_prefill_tokens=prefill,
        max_batch_total_tokens=num_blocks * bs,
    )


def load_draft_model(
    backend: Backend, config: EngineConfig, info: ModelInfo, say: Callable[[str], None]
) -> Proposer:
    """`--speculative-model`: the draft model on the same backend (one process), with a KV cache of as many
    tokens as the target's; refused when it cannot guess the target's tokens (another vocabulary)."""
    from tgi.core.loading import resolve_model
    from tgi.core.speculative import DraftModelProposer

    if not config.speculate:
        raise ConfigError("--speculative-model needs --speculate N (the guesses per step)")
    source = resolve_model(config.speculative_model, trust_remote_code=config.trust_remote_code)
    # the target's LoRA adapters do not fit the draft: it guesses with its base weights (verification keeps
    # the output the adapter's)
    draft_config = dataclasses.replace(
        config, model_id=config.speculative_model, revision=None, num_shard=1, speculative_model=None,
        lora_adapters=(),
    )  # fmt: skip
    runner = backend.create_runner(source, draft_config, 1)
    draft = runner.load()
    if draft.vocab_size != info.vocab_size:
        runner.shutdown()
        raise ConfigError(
            f"--speculative-model {config.speculative_model}: its vocabulary ({draft.vocab_size} tokens) is "
            f"not the model's ({info.vocab_size}): guesses must be the model's tokens"
        )
    num_blocks = config.max_batch_total_tokens // config.block_size
    runner.initialize_cache(num_blocks)
    say(
        f"draft model: {draft.architecture}, {draft.num_parameters / 1e6:.0f}M parameters, {num_blocks} KV blocks"
    )
    return DraftModelProposer(runner, num_blocks, config.block_size)


def _compiled_for(params: SamplingParams) -> CompiledGrammar | None:
    """The compiled grammar `params` carries, if it is the one of `params.grammar`."""
    compiled = params.compiled_grammar
    return compiled if compiled is not None and compiled.grammar == params.grammar else None


def require_compiled_grammar(params: SamplingParams) -> CompiledGrammar | None:
    """The compiled grammar a request with a grammar must carry (None without a grammar); `ValueError` (a
    caller's bug, not the client's) when it does not: the engine thread never compiles."""
    if params.grammar is None:
        return None
    compiled = _compiled_for(params)
    if compiled is None:
        raise ValueError(
            "a request with a grammar must carry it compiled (LLMEngine.with_compiled_grammar, off the "
            "engine thread and the event loop)"
        )
    return compiled


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
        self.limits = RequestLimits(
            config.max_input_tokens, config.max_total_tokens, info.vocab_size, info.lora_adapters
        )
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
        self.guided = GuidedDecoding(info.vocab_size)
        self.proposer = self._proposer(config, runner, constraints) if proposer is None else proposer
        # compiles nothing until a grammar comes (llguidance is imported then)
        self._grammars = GrammarCompiler(tokenizer, info.vocab_size, self.eos_token_ids)
        # the LoRA adapters requests may name, loaded and unloaded at run time, and their prefix-cache keys
        self.lora = ServedAdapters(self, info.lora_adapters)

    @staticmethod
    def _proposer(config: EngineConfig, runner: ModelRunner, constraints) -> Proposer | None:
        """The proposer `--speculate` asks for, or `ConfigError` naming what the runner lacks."""
        if not config.speculate:
            return None
        missing = [
            what
            for what, ok in (
                ("verification of several tokens per sequence", runner.capabilities().draft_verification),
                ("chunked prefill", constraints.chunked_prefill),
                ("mixed batches", constraints.mixed_batches),
            )
            if not ok
        ]
        if missing:
            raise ConfigError(
                f"--speculate {config.speculate}: this backend's runner lacks {', '.join(missing)}"
            )
        if config.speculative_model:
            raise ConfigError("--speculative-model: the draft model is loaded by LLMEngine.from_config")
        if runner.capabilities().medusa_heads:
            return MedusaProposer()
        return NgramProposer()

    @classmethod
    def from_config(
        cls, config: EngineConfig, registry=None, progress: Callable[[str], None] | None = None
    ) -> LLMEngine:
        """Select the backend, resolve and load the model, size the KV cache, warm up."""
        from tgi.core.loading import resolve_model
        from tgi.core.plugins import BackendRegistry
        from tgi.core.tokenization import load_tokenizer

        say = progress or (lambda msg: log.info(msg))
        spec = (registry or BackendRegistry()).select(config.backend)
        backend = spec.create()
        backend.spec = spec  # how a backend that runs ranks in other processes builds them
        if config.attention:
            backend.select_attention(config.attention)
        dtype = config.dtype or backend.default_dtype()
        backend.check_dtype(dtype)
        why = "" if config.dtype else backend.default_dtype_reason()
        fraction = config.kv_cache_memory_fraction or backend.kv_cache_memory_fraction
        config = dataclasses.replace(config, dtype=dtype, kv_cache_memory_fraction=fraction)
        attention = backend.attention().name if hasattr(backend, "attention") else "the backend's own"
        dtype_note = f"dtype {dtype} (the default: {why})" if why else f"dtype {dtype}"
        if config.deterministic:  # before the runner picks its kernels
            try:
                backend.use_batch_invariant_kernels(dtype)
            except UnsupportedError as e:
                raise ConfigError(f"--deterministic: {e}") from e
            attention = backend.attention().name if hasattr(backend, "attention") else attention
        say(f"backend: {spec.name} ({backend.devices()[0].name}), {dtype_note}, attention {attention}")
        if config.deterministic:
            say(
                "deterministic mode on: batch-invariant kernels, a request's tokens do not depend on what "
                "runs beside it (--deterministic)"
            )
        if config.cuda_graphs and not backend.captures_graphs:
            raise ConfigError(
                f"--cuda-graphs: the {spec.name} backend does not capture graphs (give 0, or omit it)"
            )
        source = resolve_model(config.model_id, config.revision, config.trust_remote_code)
        if config.rope_scaling is not None:  # every rank loads its config from the source
            source = dataclasses.replace(source, rope_scaling=config.rope_scaling)
        say(f"model: {source.model_id} ({source.format}: {source.path})")
        t0 = time.perf_counter()
        tokenizer = load_tokenizer(source)
        # --num-shard: the backend decides how its devices share the model (torch backends: one process per
        # rank, tensor-parallel layers)
        runner = backend.create_runner(source, config, config.num_shard)
        try:
            info = runner.load()
            wanted = tuple(name for name, _ in config.lora_adapters)
            if info.lora_adapters != wanted:
                raise ConfigError(
                    f"--lora-adapters: the {spec.name} backend's runner does not serve LoRA adapters"
                )
            if config.quantize and info.quantization is None:
                raise ConfigError(
                    f"--quantize {config.quantize}: the {spec.name} backend's runner loaded no quantized weights"
                )
            if info.quantization is not None:
                q = info.quantization
                say(f"quantization: {q.description}: {q.num_linears} linears on {q.kernel}")
            say(
                f"weights loaded: {info.architecture}, {info.num_parameters / 1e6:.0f}M parameters in {time.perf_counter() - t0:.1f}s"
            )
            config = derive_limits(config, info, runner, backend)
            runner.initialize_cache(config.max_batch_total_tokens // config.block_size)
            say(
                f"KV cache: {config.max_batch_total_tokens} tokens; max input {config.max_input_tokens}, "
                f"max total {config.max_total_tokens}, step budget {config.max_batch_prefill_tokens} tokens"
            )
            t0 = time.perf_counter()
            runner.warmup(config.max_batch_prefill_tokens, config.max_num_seqs)
            say(f"warm-up done in {time.perf_counter() - t0:.1f}s")
            kernels = backend.describe_kernels(dtype)
            if kernels:
                say("kernels: " + "; ".join(f"{name} {impl}" for name, impl in kernels.items()))
        except BaseException:
            runner.shutdown()  # tensor parallel: stops the worker processes
            raise
        proposer = None
        if config.speculative_model:
            try:
                proposer = load_draft_model(backend, config, info, say)
            except BaseException:
                runner.shutdown()
                raise
        return cls(backend, runner, tokenizer, config, info, proposer)

    # -- requests ---------------------------------------------------------------------------------------
    def validate(self, prompt_token_ids: list[int], params: SamplingParams) -> SamplingParams:
        """`params` with its defaults resolved, or `ValidationError` (TGI's 422) for a request that does not
        fit the limits or asks for what this backend cannot do: the request's one validation
        (`tgi.core.validation`). It never compiles a grammar: `with_compiled_grammar` does, off the engine
        thread (the server's validation step; `add_request` for the in-process API)."""
        params = validate_request(prompt_token_ids, params, self.limits)
        if params.prompt_logprobs and not self.runner.capabilities().prompt_logprobs:
            raise ValidationError(
                f"the {self._backend_name()} backend cannot return prompt logprobs: `decoder_input_details` "
                "is not supported"
            )
        if params.grammar is not None:
            self._check_token_masks()
        return params

    def _backend_name(self) -> str:
        return getattr(getattr(self.backend, "spec", None), "name", type(self.backend).__name__)

    def _check_token_masks(self) -> None:
        if not self.runner.capabilities().token_masks:
            raise ValidationError(
                f"the {self._backend_name()} backend cannot apply grammar masks: `grammar` (guided decoding) "
                "is not supported"
            )

    def compile_grammar(self, grammar: Grammar) -> CompiledGrammar:
        """The grammar compiled against this model's tokenizer (cached by grammar), or `ValidationError`
        saying why it cannot constrain this model's output, or `CompilerBusyError` when it cannot be
        compiled now. Thread-safe; it may take seconds: never call it on an event loop or the engine thread.
        The only caller of the grammar compiler."""
        self._check_token_masks()
        try:
            return self._grammars.compile(grammar)
        except GrammarError as exc:
            raise ValidationError(str(exc)) from None

    def with_compiled_grammar(self, params: SamplingParams) -> SamplingParams:
        """`params` carrying its grammar compiled (`compile_grammar`, unless it carries it already): what
        a request with a grammar must be queued with."""
        if params.grammar is None or _compiled_for(params) is not None:
            return params
        return dataclasses.replace(params, compiled_grammar=self.compile_grammar(params.grammar))

    def add_request(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> str:
        """Validate, compile its grammar (on the caller's thread: the in-process API) and queue a request;
        returns its id."""
        params = self.with_compiled_grammar(self.validate(prompt_token_ids, params))
        return self.add_validated_request(prompt_token_ids, params, request_id)

    def add_validated_request(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> str:
        """Queue a request whose `params` came from `validate` (checked, defaults resolved) and carry its
        grammar compiled (`with_compiled_grammar`): the engine thread of `AsyncEngine` adds what its caller
        validated, without checking it again, and never compiles."""
        compiled = require_compiled_grammar(params)
        request_id = request_id or uuid.uuid4().hex
        seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
        # a LoRA adapter changes the keys/values: its blocks are cached apart from the base model's (and from
        # those of an earlier adapter of the same id)
        cache_key = b"" if params.adapter_id is None else self.lora.cache_key(params.adapter_id)
        seq = Sequence(request_id, list(prompt_token_ids), params, seed, cache_key=cache_key)
        if compiled is not None:
            self.guided.start(request_id, compiled)
        self._outputs[request_id] = RequestOutput(seq, self.tokenizer, self.eos_token_ids)
        self.scheduler.add(seq)
        return request_id

    def abort(self, request_id: str) -> bool:
        """Cancel a request; its KV blocks are free when this returns."""
        self._outputs.pop(request_id, None)
        self.guided.drop(request_id)
        if self.proposer is not None:
            self.proposer.drop(request_id)
        return self.scheduler.abort(request_id)

    def abort_all(self) -> list[str]:
        """Cancel every request in flight (after a failed step); returns their ids."""
        ids = list(self._outputs)
        for request_id in ids:
            self.abort(request_id)
        return ids

    def close(self) -> None:
        """Release the model once no step runs any more (a model swapped out): every request still in flight
        is aborted, the runner shuts down (weights, KV cache, worker processes), the draft model's too, and
        the backend hands the freed memory back (`Backend.release_memory`). The engine cannot step again."""
        self.abort_all()
        self.runner.shutdown()
        draft = getattr(self.proposer, "runner", None)  # --speculative-model's runner
        if draft is not None:
            draft.shutdown()
        self.backend.release_memory()

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

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
        )

    # -- the step ---------------------------------------------------------------------------------------
    def step(self) -> list[TokenEvent]:
        """Schedule, run the model, sample, and turn new tokens into events (finishing sequences that
        stop). Returns the events of this step, in batch order."""
        if self.proposer is not None:
            self._propose()
        batch = self.scheduler.schedule()
        self.num_batch_tokens = batch.num_tokens
        self.num_prefill_tokens += batch.num_prefill_tokens
        if batch.is_empty:
            return []
        try:
            return self._run_step(batch)
        except Exception as exc:
            if getattr(exc, "fatal", False):  # e.g. a tensor-parallel rank died: no step can run
                raise
            raise StepError([seq.request_id for seq in batch.sequences]) from exc

    def _run_step(self, batch) -> list[TokenEvent]:
        now = time.monotonic()
        for s in batch.sequences:
            out = self._outputs.get(s.request_id)
            if out is not None and out.first_scheduled is None:
                out.first_scheduled = now
        if len(self.guided):
            batch.token_masks = self.guided.masks([s for s in batch.sequences if s.sample])
        output: StepOutput = self.runner.execute(batch)
        for request_id, logprobs in output.prompt_logprobs.items():
            if request_id in self._outputs:
                self._outputs[request_id].prompt_logprobs.extend(logprobs)
        first_row: dict[str, int] = {}
        for i, rid in enumerate(output.request_ids):
            first_row.setdefault(rid, i)  # a verified sequence has one row per position, consecutive
        events = []
        for seq in self.scheduler.update(batch, output):
            out = self._outputs[seq.request_id]
            start = first_row[seq.request_id]
            for i in range(start, start + seq.num_new_tokens):
                tops = None
                if output.top_token_ids is not None and seq.params.top_n_tokens:
                    n = seq.params.top_n_tokens
                    tops = (output.top_token_ids[i][:n], output.top_logprobs[i][:n])
                event = out.on_token(output.token_ids[i], output.logprobs[i], tops)
                if event.finish_reason is not None and seq.num_accepted_drafts:
                    event = dataclasses.replace(event, num_skipped_tokens=seq.num_accepted_drafts)
                events.append(event)
                if event.finish_reason is not None:  # tokens accepted past a stop are dropped
                    self.scheduler.finish(seq.request_id, event.finish_reason)
                    del self._outputs[seq.request_id]
                    self.guided.drop(seq.request_id)
                    if self.proposer is not None:
                        self.proposer.drop(seq.request_id)
                    break
                self.guided.advance(seq.request_id, output.token_ids[i])
            else:
                if output.guesses is not None and isinstance(self.proposer, MedusaProposer):
                    # the heads' guesses at the last token drawn, for the next step
                    guesses = output.guesses[start + seq.num_new_tokens - 1]
                    self.proposer.remember(seq.request_id, seq.num_tokens, guesses)
        return events

    def _propose(self) -> None:
        """Guesses for every running sequence about to decode (none under a grammar, and never more than
        its remaining `max_new_tokens` allow, less the token verification adds)."""
        k = self.config.speculate
        asks, seqs = [], []
        for seq in self.scheduler.running:
            seq.draft_token_ids = []
            if not seq.is_decode or seq.request_id in self.guided:
                continue
            if seq.spec_wait > 0:  # its last guesses all failed: a few plain decodes first
                seq.spec_wait -= 1
                continue
            room = min(k, seq.params.max_new_tokens - seq.num_output_tokens - 1)
            if room > 0:
                asks.append((seq.request_id, seq.token_ids, room))
                seqs.append(seq)
        if asks:
            for seq, guesses in zip(seqs, self.proposer.propose_batch(asks), strict=True):
                seq.draft_token_ids = guesses

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
