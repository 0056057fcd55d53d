"""Continuous batching with chunked prefill and preemption by recomputation (no torch here).

Each step (`schedule`) first gives every running sequence its share, decodes before prefill chunks, then
admits waiting sequences while the token budget, the sequence limit and the free blocks allow. A prompt
longer than the budget left is fed in chunks, so a long prompt never stalls running decodes. When a running
sequence cannot get a block for its next tokens, the lowest-ranked running sequence is preempted: its
blocks are freed and it goes back to the waiting queue, to be recomputed (prompt + output so far) later.

Prefix caching (when the block manager has it on): a sequence admitted from the waiting queue first takes
the longest chain of cached blocks that starts its tokens, and only the rest counts against the step's
token budget and is fed. At least its last known token is always fed (its logits give the next token),
and a sequence that wants prompt logprobs takes no cached block past the prompt positions it has already
been given logprobs for. After each step, the blocks it completed are entered in the cache. Preemption
and cancellation free blocks as before: cached ones stay findable until their blocks are reused.

How long each chunk is (the budget left, the runner's buckets and padded prefill area, prompt logprobs
owed, the images a step may start encoding: `max_encoder_tokens_per_step`) and where an admitted sequence
starts in the prefix cache: `tgi.core.chunk_policy`.

Rank: higher `params.priority` first, then arrival order (FIFO within a priority).

Engine contract, once per step: `batch = schedule()` -> `out = runner.execute(batch)` (skip when
`batch.is_empty`) -> `new = update(batch, out)` -> stop checks on `new` -> `finish(id, reason)`. `abort`
may be called between steps. `update` must be called for a batch before the next `schedule`. Overlapped
steps instead: `schedule` -> start the step -> `settle` the step before -> `advance(batch)`, so that the next
`schedule` runs while the device runs this one (`advance`, `settle`).
"""

from __future__ import annotations

import bisect
import sys
import time
from collections import deque

from tgi.core.block_manager import BlockManager
from tgi.core.chunk_policy import ChunkPolicy
from tgi.core.config import ConfigError, EngineConfig
from tgi.core.interfaces.batch import PENDING_TOKEN, ScheduledBatch, StepOutput
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.request import FinishReason
from tgi.core.sequence import MAX_SPEC_BACKOFF, Sequence, SequenceStatus
from tgi.core.step_rows import SchedulerError, accepted_drafts, rows_by_request

__all__ = ["Scheduler", "SchedulerError", "accepted_drafts", "rows_by_request"]


def _rank(seq: Sequence) -> tuple[int, int]:
    return (-seq.priority, seq.arrival_index)


class Scheduler:
    """Decides, each step, which tokens of which sequences run (see the module docstring).

    `max_num_seqs`: sequences running at once (also capped by `constraints.max_batch_size`).
    `max_batch_tokens`: tokens fed per step, prefill chunks and decodes together (also capped by
    `constraints.max_batch_tokens`).
    `max_encoder_tokens_per_step`: placeholder tokens of the images one step may start encoding (None:
    unbounded); a prefill chunk that would start an image beyond it is cut before that image.
    """

    def __init__(
        self,
        block_manager: BlockManager,
        max_num_seqs: int,
        max_batch_tokens: int,
        constraints: RunnerConstraints | None = None,
        max_encoder_tokens_per_step: int | None = None,
    ) -> None:
        c = constraints if constraints is not None else RunnerConstraints()
        if max_num_seqs < 1 or max_batch_tokens < 1:
            raise ConfigError("max_num_seqs and max_batch_tokens must be >= 1")
        if c.block_size is not None and c.block_size != block_manager.block_size:
            raise ConfigError(f"the runner needs block size {c.block_size}, got {block_manager.block_size}")
        self.block_manager = block_manager
        self.constraints = c
        self.max_num_seqs = min(max_num_seqs, c.max_batch_size or max_num_seqs)
        self.max_batch_tokens = min(max_batch_tokens, c.max_batch_tokens or max_batch_tokens)
        self.chunks = ChunkPolicy(block_manager, max_batch_tokens, c, max_encoder_tokens_per_step)
        self.waiting: list[Sequence] = []  # sorted by _rank
        self.running: list[Sequence] = []
        self._seqs: dict[str, Sequence] = {}  # every unfinished sequence, by request id
        self._freed: list[str] = []  # ids freed since the last non-empty batch
        self._arrivals = 0
        self._step = 0
        self._last_step_prefill = False  # mixed_batches=False: alternate kinds when both have work
        self.num_preemptions = 0  # total, for metrics
        # tokens of admitted sequences (first admissions and re-admissions after preemption) found in the
        # prefix cache, and those that had to be computed; for metrics
        self.num_cache_hit_tokens = 0
        self.num_cache_miss_tokens = 0
        # speculative decoding: guesses fed for verification, and those accepted (for metrics)
        self.num_draft_tokens = 0
        self.num_accepted_draft_tokens = 0

    @classmethod
    def from_config(
        cls, config: EngineConfig, block_manager: BlockManager, constraints: RunnerConstraints | None = None
    ) -> Scheduler:
        if config.max_batch_prefill_tokens is None:
            raise ConfigError("max_batch_prefill_tokens must be derived before building the scheduler")
        return cls(
            block_manager,
            config.max_num_seqs,
            config.max_batch_prefill_tokens,
            constraints,
            config.max_encoder_tokens_per_step,
        )

    # ---- counters -----------------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_used_blocks(self) -> int:
        return self.block_manager.num_used_blocks

    @property
    def num_cached_tokens(self) -> int:
        """Tokens whose keys/values are in the cache, over running sequences."""
        return sum(s.num_computed_tokens for s in self.running)

    def has_unfinished(self) -> bool:
        return bool(self._seqs)

    def get(self, request_id: str) -> Sequence | None:
        return self._seqs.get(request_id)

    # ---- queue ----------------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        """Queue a new sequence. Raises `ValueError` for one that could never run."""
        if seq.request_id in self._seqs:
            raise ValueError(f"request id {seq.request_id!r} is already scheduled")
        if seq.status is not SequenceStatus.WAITING or seq.num_computed_tokens or seq.block_table:
            raise ValueError(f"{seq.request_id}: only a fresh sequence can be added")
        self.chunks.check_admissible(seq)
        seq.arrival_index = self._arrivals
        self._arrivals += 1
        self._seqs[seq.request_id] = seq
        self._enqueue(seq)

    def finish(self, request_id: str, reason: FinishReason) -> Sequence:
        """End a sequence now: free its blocks and drop it from the queues. Raises `KeyError` if unknown."""
        seq = self._seqs.pop(request_id)
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self._freed.append(request_id)
        return seq

    def abort(self, request_id: str) -> bool:
        """Cancel a request in any state; idempotent. Returns whether it was live."""
        if request_id not in self._seqs:
            return False
        self.finish(request_id, FinishReason.CANCELLED)
        return True

    # ---- one step -------------------------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        """Build the next step's batch: prefill chunks first, then decodes. Allocates the blocks it needs,
        preempting running sequences when the cache is full. May return an empty batch (nothing to do)."""
        self._step += 1
        if self.constraints.mixed_batches:
            prefills, decodes = self._plan(allow_decode=True, allow_prefill=True)
        else:
            # One kind per step; alternate when both have work, so neither starves.
            kinds = [(False, True), (True, False)]
            if self._last_step_prefill:
                kinds.reverse()
            for allow_decode, allow_prefill in kinds:
                prefills, decodes = self._plan(allow_decode, allow_prefill)
                if prefills or decodes:
                    break
        self._last_step_prefill = bool(prefills)
        sequences = [s.scheduled(n, True) for s, n in prefills]
        sequences += [s.scheduled(n, False) for s, n in decodes]
        batch = ScheduledBatch(self._step, sequences, len(prefills))
        if sequences:  # freed ids ride on the next batch the runner actually executes
            batch.freed_request_ids, self._freed = self._freed, []
        return batch

    def update(self, batch: ScheduledBatch, output: StepOutput) -> list[Sequence]:
        """Apply a step's results: advance each scheduled sequence by its chunk, append sampled tokens.
        Returns the sequences that got a new token, in batch order. Sequences finished or aborted since
        `schedule` are skipped."""
        rows = rows_by_request(output)
        new_tokens: list[Sequence] = []
        for s in batch.sequences:
            seq = self._seqs.get(s.request_id)
            if seq is None or seq.status is not SequenceStatus.RUNNING:
                continue
            if seq.num_computed_tokens != s.start_pos:
                raise SchedulerError(f"{s.request_id}: update out of order (call it once per batch)")
            seq.draft_token_ids = []
            mine = rows.get(s.request_id, range(0)) if s.sample else range(0)
            drawn = output.token_ids[mine.start : mine.stop]
            if s.sample and len(drawn) != s.num_draft_tokens + 1:
                raise SchedulerError(
                    f"{s.request_id}: the runner returned {len(drawn)} tokens for "
                    f"{s.num_draft_tokens + 1} sampled positions"
                )
            # the guesses that equal what the request drew are kept: their keys/values stay, the rest of
            # the chunk's are overwritten when the positions are fed again
            accepted = accepted_drafts(s.token_ids[len(s.token_ids) - s.num_draft_tokens :], drawn)
            seq.num_computed_tokens += s.num_tokens - s.num_draft_tokens + accepted
            self.num_draft_tokens += s.num_draft_tokens
            self.num_accepted_draft_tokens += accepted
            seq.num_accepted_drafts += accepted
            seq.num_rejected_drafts += s.num_draft_tokens - accepted
            if s.num_draft_tokens:  # text the guesses do not fit is guessed for less and less often
                seq.spec_backoff = 0 if accepted else min(MAX_SPEC_BACKOFF, max(1, 2 * seq.spec_backoff))
                seq.spec_wait = seq.spec_backoff
            if s.sample:  # first: the accepted guesses' positions are computed tokens now
                for token_id in drawn[: accepted + 1]:
                    seq.append_token(token_id)
                seq.new_token_rows = range(mine.start, mine.start + accepted + 1)
                new_tokens.append(seq)
            self.block_manager.cache_computed(seq)
            if s.want_prompt_logprobs:
                seq.prompt_logprobs_upto = s.start_pos + s.num_tokens
        return new_tokens

    # ---- overlapped steps (the runner's `async_steps`) -------------------------------------------------
    def advance(self, batch: ScheduledBatch) -> None:
        """Take `batch` as run before its output is back, so that the next `schedule` can follow it: every
        chunk's keys/values count as computed, and each sampled sequence gets `PENDING_TOKEN` as its next
        token, filled by `settle`; a sequence that ended since `schedule` is skipped. For batches without
        guesses only; `settle` must follow before the next `advance`. Blocks are entered in the prefix cache
        by `settle`, once their tokens are known."""
        for s in batch.sequences:
            seq = self._seqs.get(s.request_id)
            if seq is None:
                continue  # ended when the step before was settled (after this one was scheduled)
            if seq.num_computed_tokens != s.start_pos or s.num_draft_tokens:
                raise SchedulerError(f"{s.request_id}: advance out of order, or over guesses")
            seq.num_computed_tokens += s.num_tokens
            if s.sample:
                seq.append_token(PENDING_TOKEN)
            if s.want_prompt_logprobs:
                seq.prompt_logprobs_upto = s.start_pos + s.num_tokens

    def settle(self, batch: ScheduledBatch, output: StepOutput) -> list[Sequence]:
        """Fill the tokens `advance(batch)` left pending with `output`'s; returns the sequences that got one,
        in batch order (`update`'s contract). A sequence finished or aborted since is skipped; one preempted
        since gets its token too (it recomputes with it)."""
        rows = rows_by_request(output)
        new_tokens: list[Sequence] = []
        for s in batch.sequences:
            seq = self._seqs.get(s.request_id)
            if seq is None:
                continue
            if s.sample:
                row, at = rows[s.request_id].start, s.start_pos + s.num_tokens
                if len(rows[s.request_id]) != 1 or seq.token_ids[at] != PENDING_TOKEN:
                    raise SchedulerError(f"{s.request_id}: settled twice, or not advanced")
                seq.token_ids[at] = output.token_ids[row]
                seq.new_token_rows = range(row, row + 1)
                new_tokens.append(seq)
            if seq.status is SequenceStatus.RUNNING:
                self.block_manager.cache_computed(seq)
        return new_tokens

    # ---- internals ------------------------------------------------------------------------------------
    def _enqueue(self, seq: Sequence) -> None:
        # Ranking by original arrival puts a preempted sequence ahead of every later arrival of its priority.
        bisect.insort(self.waiting, seq, key=_rank)

    def _plan(
        self, allow_decode: bool, allow_prefill: bool
    ) -> tuple[list[tuple[Sequence, int]], list[tuple[Sequence, int]]]:
        bm = self.block_manager
        budget = self.max_batch_tokens
        max_encoder = self.chunks.max_encoder_tokens
        encoder_budget = sys.maxsize if max_encoder is None else max_encoder
        prefills: list[tuple[Sequence, int]] = []
        decodes: list[tuple[Sequence, int]] = []
        ranked = sorted(self.running, key=_rank)
        todo = deque([s for s in ranked if s.is_decode] + [s for s in ranked if not s.is_decode])
        preempted = False
        scheduled: set[str] = set()  # ids given tokens this step: never preempted
        while todo and budget > 0:
            seq = todo.popleft()
            is_decode = seq.is_decode
            if not (allow_decode if is_decode else allow_prefill):
                continue
            limit = seq.params.max_new_tokens
            if seq.token_ids[-1] == PENDING_TOKEN and limit is not None and seq.num_output_tokens >= limit:
                continue  # its last token, still on the device (overlapped steps), is its last: it ends settled
            n = self.chunks.chunk_len(
                seq, budget if is_decode else self.chunks.prefill_budget(budget, prefills)
            )
            if not is_decode:
                n = self.chunks.encoder_cut(seq, seq.num_computed_tokens, n, encoder_budget, False).num_tokens
            if n == 0:
                continue
            if is_decode and seq.draft_token_ids:
                # the last token and the guesses after it, as far as the budget and the free blocks go
                # guesses never cost another sequence its room: they take new blocks only while a block
                # per running sequence stays free
                spare = max(0, bm.num_free_blocks - len(self.running))
                room = (len(seq.block_table) + spare) * bm.block_size - seq.num_computed_tokens
                n = max(1, min(1 + len(seq.draft_token_ids), budget, self.chunks.max_chunk_tokens, room))
                del seq.draft_token_ids[n - 1 :]
            while not bm.can_allocate(seq, n):
                fits = bm.free_token_capacity(seq)
                if not is_decode and self.constraints.chunked_prefill and fits > 0:
                    fits = self.chunks.image_cut(seq, seq.num_computed_tokens, fits)
                if not is_decode and self.constraints.chunked_prefill and fits > 0:
                    n = fits  # a smaller prefill chunk beats preempting someone
                    break
                victim = self._pick_victim(seq, scheduled)
                # When `seq` itself ranks lowest it waits instead, provided someone else still runs.
                lowest = victim is None or _rank(victim) < _rank(seq)
                if lowest and self.chunks.recomputable(seq) and (victim is not None or prefills or decodes):
                    victim = seq
                if victim is None:
                    raise SchedulerError(
                        f"{seq.request_id}: cannot get a KV block with nothing else to preempt "
                        f"({bm.num_blocks} blocks of {bm.block_size}); the request exceeds the cache"
                    )
                if victim in todo:
                    todo.remove(victim)
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq.status is not SequenceStatus.RUNNING:
                continue
            bm.allocate(seq, n)
            if not is_decode:
                start = seq.num_computed_tokens
                encoder_budget -= self.chunks.encoder_cut(seq, start, n, encoder_budget, False).encoder_tokens
            (decodes if is_decode else prefills).append((seq, n))
            scheduled.add(seq.request_id)
            budget -= n
        # No admissions after a preemption: the freed blocks would only be fought over again.
        if allow_prefill and not preempted:
            while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
                seq = self.waiting[0]
                prefix = self.chunks.cached_prefix(seq)
                n = self.chunks.chunk_len(
                    seq, self.chunks.prefill_budget(budget, prefills), prefix.num_tokens
                )
                cut = self.chunks.encoder_cut(seq, prefix.num_tokens, n, encoder_budget, True)
                n = cut.num_tokens
                if n == 0 or not bm.can_allocate(seq, n, prefix):
                    break  # head-of-line: keep priority and FIFO order strict
                bm.allocate(seq, n, prefix)
                self.waiting.pop(0)
                seq.status = SequenceStatus.RUNNING
                self.num_cache_hit_tokens += prefix.num_tokens
                self.num_cache_miss_tokens += seq.num_tokens - prefix.num_tokens
                if seq.first_scheduled_time is None:
                    seq.first_scheduled_time = time.monotonic()
                    seq.num_cached_prompt_tokens = min(prefix.num_tokens, seq.num_prompt_tokens)
                self.running.append(seq)
                prefills.append((seq, n))
                budget -= n
                encoder_budget -= cut.encoder_tokens
        return prefills, decodes

    def _pick_victim(self, seq: Sequence, scheduled: set[str]) -> Sequence | None:
        """The lowest-ranked other running sequence, not scheduled this step, that can be recomputed."""
        candidates = [
            s
            for s in self.running
            if s is not seq and s.request_id not in scheduled and self.chunks.recomputable(s)
        ]
        return max(candidates, key=_rank) if candidates else None

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self._freed.append(seq.request_id)
        self._enqueue(seq)
