"""The engines the runner-level conformance suite (`runner_conformance.RunnerConformance`) runs its checks
on: a backend built as a third party's would be, a small random-weight Llama and `transformers`' greedy
tokens for it, and `LLMEngine`s whose runner checks every batch against what its `constraints()` declare
(`constraint_violations`). It imports no framework itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from tgi.core.interfaces import Backend, RunnerConstraints
from tgi.core.interfaces.batch import ScheduledBatch
from tgi.core.testing.model import PROMPTS, backend_registry, write_tiny_llama

#: the reference's length: every request generates this many tokens (EOS ignored), unless a backend's suite
#: sets `max_new_tokens`
MAX_NEW_TOKENS = 8
_REFERENCE: dict[tuple[str, int], list[list[int]]] = {}  # transformers' greedy tokens, by checkpoint, length


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


class ConformanceEngines:
    """What the checks share: the knobs (a backend's subclass sets them), the backend, the tiny checkpoint
    and its reference tokens, and engines whose every batch is checked against the runner's constraints."""

    #: build the backend through the plugin host by this name (when `make_backend` is not overridden)
    backend_name: ClassVar[str | None] = None
    #: dtype of the engine (default: float32 when supported, else the backend's default)
    generation_dtype: ClassVar[str | None] = None
    #: the engine's step budget: 32 prefills the 45-token prompt in two chunks (64 for runners that cannot)
    max_batch_prefill_tokens: ClassVar[int] = 32
    #: the tokens each request generates (the reference's length); a backend whose steps are slow (Triton's
    #: interpreter) sets fewer: 5 still leaves the preemption, cancellation and early-stop checks room
    max_new_tokens: ClassVar[int] = MAX_NEW_TOKENS
    #: how many other requests the deterministic check runs its target beside (7: its 45-token prompt chunked
    #: elsewhere, its decodes in a batch of 9); a backend whose steps are slow sets fewer (3: still chunked
    #: elsewhere, decoded in a batch of 5)
    deterministic_crowd: ClassVar[int] = 7

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

        key = (str(tiny_llama), self.max_new_tokens)
        if key not in _REFERENCE:
            _REFERENCE[key] = transformers_greedy(tiny_llama, PROMPTS, self.max_new_tokens)
        return _REFERENCE[key]

    def engine_dtype(self, backend: Backend) -> str:
        """The dtype of the engines the suite builds: `generation_dtype`, else float32 where supported."""
        return self.generation_dtype or (
            "float32" if "float32" in backend.supported_dtypes() else backend.default_dtype()
        )

    def make_engine(self, backend: Backend, model_path, checked: dict[str, Any], **limits: Any):
        """An `LLMEngine` on `backend` (through the plugin host) whose runner checks every batch against
        its constraints into `checked`."""
        from tgi.core.config import EngineConfig
        from tgi.core.engine import LLMEngine

        dtype = self.engine_dtype(backend)
        settings = dict(
            model_id=str(model_path), backend=backend.name, dtype=dtype,
            block_size=self.engine_block_size(backend), max_total_tokens=128, max_batch_total_tokens=1024,
            max_batch_prefill_tokens=self.max_batch_prefill_tokens, max_num_seqs=8,
        )  # fmt: skip
        config = EngineConfig(**{**settings, **limits})
        engine = LLMEngine.from_config(config, registry=backend_registry(backend.name, lambda: backend))
        constraints, block_size = engine.runner.constraints(), engine.config.block_size

        def checking(run: Callable) -> Callable:
            def checked_run(batch: ScheduledBatch):
                checked["count"] += 1
                checked["violations"] += constraint_violations(batch, constraints, block_size)
                return run(batch)

            return checked_run

        engine.runner.execute = checking(engine.runner.execute)  # the instance's, for this engine only
        if engine.steps.overlapping:  # overlapped steps start through `execute_async`
            engine.runner.execute_async = checking(engine.runner.execute_async)
        return engine

    def _params(self):
        from tgi.core.sampling_params import SamplingParams

        return SamplingParams(max_new_tokens=self.max_new_tokens, ignore_eos=True)

    @staticmethod
    def _assert_all_blocks_free(engine) -> None:
        bm = engine.block_manager
        assert not engine.has_unfinished()
        assert bm.num_free_blocks == bm.num_blocks, f"{bm.num_blocks - bm.num_free_blocks} blocks still held"
        bm.check_invariants()
