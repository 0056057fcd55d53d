"""Grammars compiled against the model's tokenizer with llguidance, cached by grammar.

llguidance (https://github.com/guidance-ai/llguidance) was measured against xgrammar on the default model's
tokenizer (SmolLM2, 49,152 tokens; `src/tgi/benchmarks/README.md`, "Guided decoding"): both give a mask in well
under a step's time, xgrammar's per-token masks are faster once compiled, llguidance compiles lazily
(about 1 ms where xgrammar spent up to 4 ms up front), takes Lark grammars that embed JSON schemas (which
`tool_choice: "auto"` needs: text or a tool call in one grammar), explains invalid schemas and regexes in
words a client can act on, and is one small wheel (xgrammar pulls in triton and a TVM runtime).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tgi.core.guided.grammar import JSON_STYLE, CompilerBusyError, Grammar, GrammarError

log = logging.getLogger(__name__)

#: seconds a grammar may take to compile, from the moment a worker starts on it, before the request is
#: refused (llguidance's own fuel limits bound the work; this bounds the wait). A grammar also waits at
#: most this long for a free worker.
DEFAULT_COMPILE_TIMEOUT_S = 10.0
#: threads that compile grammars
DEFAULT_COMPILE_WORKERS = 2
#: grammars compiling or waiting for a worker at once, those whose requests gave up waiting included (a
#: compile cannot be interrupted: it holds its worker until llguidance is done); past it, a new grammar is
#: refused at once with `CompilerBusyError`
DEFAULT_MAX_PENDING_COMPILES = 8


def _llguidance():
    try:
        import llguidance
        import llguidance.hf
    except ImportError as exc:
        raise GrammarError(
            f"grammar-constrained generation needs the `llguidance` package ({exc}): "
            "pip install 'tgi[guided]'"
        ) from None
    return llguidance


@dataclass
class CompiledGrammar:
    """A grammar ready to constrain requests: `new_matcher()` gives each request its own parser state."""

    grammar: Grammar
    prototype: Any  # llguidance.LLMatcher in its initial state (never advanced)

    def new_matcher(self) -> Any:
        """A fresh matcher for one request (a copy of the prototype's state: microseconds)."""
        return self.prototype.deep_copy()


@dataclass
class _Compile:
    """One grammar being compiled, or waiting for a worker; every request that asks for it waits on it."""

    future: concurrent.futures.Future | None = None
    started: threading.Event = field(default_factory=threading.Event)
    started_at: float = 0.0  # time.monotonic() when a worker took it


class GrammarCompiler:
    """Compiles `Grammar`s for one tokenizer; thread-safe; keeps the last `cache_size` results.

    `compile` validates (a `GrammarError` names what is wrong), builds the parser and computes its first
    token mask, so that the engine thread only copies a ready state. The work runs on `workers` threads of
    its own; the caller waits, with a time limit: the server calls it from a worker thread of its own,
    never on the event loop or the engine thread (the request then carries the result).

    At most `max_pending` grammars compile or wait for a worker at once; one more is refused at once with
    `CompilerBusyError`, as is a grammar that found no free worker within `timeout_s`. A grammar whose
    compile ran `timeout_s` is the client's `GrammarError`; its compile goes on (it cannot be interrupted)
    and counts against `max_pending` until it ends (its result is then cached).
    """

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        eos_token_ids: Sequence[int],
        cache_size: int = 256,
        timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S,
        workers: int = DEFAULT_COMPILE_WORKERS,
        max_pending: int = DEFAULT_MAX_PENDING_COMPILES,
    ) -> None:
        if max_pending < workers:
            raise ValueError(f"max_pending ({max_pending}) must be at least workers ({workers})")
        self.hf_tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = sorted(eos_token_ids)
        self.cache_size = cache_size
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self._lock = threading.Lock()
        self._cache: OrderedDict[Grammar, CompiledGrammar] = OrderedDict()
        self._pending: dict[Grammar, _Compile] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="tgi-grammar")
        self._lltokenizer = None
        self.num_compiled = 0  # grammars compiled since start (cache hits not counted)

    @property
    def num_pending(self) -> int:
        """Grammars compiling or waiting for a worker now."""
        return len(self._pending)

    def lltokenizer(self) -> Any:
        """llguidance's view of the tokenizer (built once: ~0.3 s for a 49k vocabulary)."""
        with self._lock:
            if self._lltokenizer is None:
                llg = _llguidance()
                self._lltokenizer = llg.hf.from_tokenizer(
                    self.hf_tokenizer, n_vocab=self.vocab_size, eos_token=self.eos_token_ids
                )
            return self._lltokenizer

    def compile(self, grammar: Grammar) -> CompiledGrammar:
        """The compiled grammar, from the cache or compiled now: `GrammarError` when it cannot be used or
        compiled for `timeout_s`, `CompilerBusyError` when it cannot be compiled now."""
        with self._lock:
            hit = self._cache.get(grammar)
            if hit is not None:
                self._cache.move_to_end(grammar)
                return hit
            job = self._pending.get(grammar)
            if job is None:  # one compilation per grammar, however many requests wait for it
                if len(self._pending) >= self.max_pending:
                    raise CompilerBusyError(
                        f"{len(self._pending)} grammars are being compiled or wait for it, the most this "
                        "server allows: retry later"
                    )
                job = self._pending[grammar] = _Compile()
                job.future = self._pool.submit(self._compile, grammar, job)
        if not job.started.wait(self.timeout_s):
            raise CompilerBusyError(
                f"no grammar compiler was free within {self.timeout_s:g} s (other grammars are compiling): "
                "retry later"
            )
        try:
            return job.future.result(timeout=max(job.started_at + self.timeout_s - time.monotonic(), 0.0))
        except concurrent.futures.TimeoutError:
            raise GrammarError(
                f"the grammar did not compile within {self.timeout_s:g} s: simplify it"
            ) from None

    def _compile(self, grammar: Grammar, job: _Compile) -> CompiledGrammar:
        job.started_at = time.monotonic()
        job.started.set()
        try:
            compiled = self._build(grammar)
        except BaseException:
            with self._lock:
                self._pending.pop(grammar, None)
            raise
        with self._lock:  # cached as it stops pending: a request for it meanwhile finds one or the other
            self._pending.pop(grammar, None)
            self.num_compiled += 1
            self._cache[grammar] = compiled
            self._cache.move_to_end(grammar)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return compiled

    def _build(self, grammar: Grammar) -> CompiledGrammar:
        llg = _llguidance()
        lltok = self.lltokenizer()
        t0 = time.perf_counter()
        text = self._grammar_text(llg, grammar)
        is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(text, lltok)
        if is_error:
            raise GrammarError(f"invalid {_NAMES[grammar.kind]}: {_first_line(messages[0])}")
        matcher = llg.LLMatcher(lltok, text)
        if matcher.is_error():
            raise GrammarError(f"invalid {_NAMES[grammar.kind]}: {_first_line(matcher.get_error())}")
        matcher.deep_copy().compute_bitmask()  # the first mask builds the lexer's initial states
        log.debug("compiled %s in %.1f ms", grammar.describe(), (time.perf_counter() - t0) * 1e3)
        return CompiledGrammar(grammar, matcher)

    @staticmethod
    def _grammar_text(llg, grammar: Grammar) -> str:
        if grammar.kind == "json_schema":
            try:
                return llg.LLMatcher.grammar_from_json_schema(grammar.source, defaults=JSON_STYLE)
            except Exception as exc:  # llguidance raises ValueError for schemas it cannot read
                raise GrammarError(f"invalid JSON schema: {_first_line(str(exc))}") from None
        if grammar.kind == "regex":
            return llg.LLMatcher.grammar_from_regex(grammar.source)
        return llg.LLMatcher.grammar_from_lark(grammar.source)


_NAMES = {"json_schema": "JSON schema", "regex": "regex", "lark": "Lark grammar"}


def _first_line(message: str) -> str:
    """The reason from an llguidance message (which goes on with a parser dump): its first line, and the
    `error:` line of a regex parse error."""
    lines = [line.strip() for line in message.strip().splitlines()]
    reason = [lines[0]] if lines else []
    reason += [line for line in lines[1:] if line.startswith("error:")]
    return " ".join(reason)
