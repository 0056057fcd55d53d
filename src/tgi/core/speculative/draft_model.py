"""Guesses from a smaller model that shares the target's tokenizer (`--speculative-model PATH`).

The draft model runs on the same backend through its own `ModelRunner`, with its own paged KV cache and
block manager. Each step, for the sequences about to decode: the draft is fed what it has not seen of each
sequence (the tokens accepted since its last guesses, or the whole prompt the first time), then decodes
greedily `k` times, all sequences batched in each of its steps. Its keys/values of guesses the target
rejected are simply overwritten: the draft's computed length falls back to the longest prefix its fed
tokens share with the sequence. A sequence the draft has no room for gets no guesses (never an error).
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

from tgi.core.block_manager import BlockManager
from tgi.core.interfaces import ModelRunner
from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence
from tgi.core.sampling_params import SamplingParams
from tgi.core.sequence import Sequence
from tgi.core.speculative.proposer import Proposer

_GREEDY = SamplingParams()


class DraftModelProposer(Proposer):
    """Greedy guesses of a draft model, batched over the sequences of a step."""

    name = "draft-model"

    def __init__(self, runner: ModelRunner, num_blocks: int, block_size: int) -> None:
        self.runner = runner
        self.blocks = BlockManager(num_blocks, block_size)
        self._state: dict[str, Sequence] = {}  # the draft's view: the tokens it was fed, its KV blocks
        self._step = 0

    def drop(self, request_id: str) -> None:
        seq = self._state.pop(request_id, None)
        if seq is not None:
            self.blocks.free(seq)

    def propose(self, request_id: str, token_ids: Seq[int], k: int) -> list[int]:
        return self.propose_batch([(request_id, token_ids, k)])[0]

    def propose_batch(self, requests: list[tuple[str, Seq[int], int]]) -> list[list[int]]:
        guesses: list[list[int]] = [[] for _ in requests]
        active = []  # (index, state, k)
        for i, (request_id, token_ids, k) in enumerate(requests):
            state = self._sync(request_id, token_ids)
            # positions fed: the unseen tokens, then every guess but the last
            if k > 0 and self._room(state, len(token_ids) + k - 1):
                active.append((i, state, k))
        while active:
            # first step: each sequence's unseen tokens (prefill chunks first); later ones: the last guess
            rows = [(self._row(state), i, state, k) for i, state, k in active]
            rows.sort(key=lambda r: not r[0].is_prefill)  # prefill chunks first, then decodes
            batch = ScheduledBatch(self._step, [r[0] for r in rows], sum(r[0].is_prefill for r in rows))
            self._step += 1
            output = self.runner.execute(batch)
            drawn = dict(zip(output.request_ids, output.token_ids, strict=True))
            still = []
            for row, i, state, k in rows:
                state.num_computed_tokens = row.start_pos + len(row.token_ids)
                token = drawn[state.request_id]
                guesses[i].append(token)
                state.append_token(token)
                if len(guesses[i]) < k:
                    still.append((i, state, k))
            active = still
        return guesses

    def _sync(self, request_id: str, token_ids: Seq[int]) -> Sequence:
        """The draft's state for a sequence, its fed tokens cut back to what they share with `token_ids`
        (guesses the target rejected are forgotten) and extended with the rest."""
        state = self._state.get(request_id)
        if state is None:
            state = Sequence(request_id, list(token_ids), _GREEDY)
            self._state[request_id] = state
            return state
        known = state.token_ids
        same = 0
        limit = min(len(known), len(token_ids), state.num_computed_tokens)
        while same < limit and known[same] == token_ids[same]:
            same += 1
        state.num_computed_tokens = same
        state.token_ids[:] = list(token_ids)
        return state

    def _room(self, state: Sequence, num_positions: int) -> bool:
        """Allocate the draft blocks for `num_positions` positions; False (and the state dropped) when the
        draft cache is full."""
        need = num_positions - state.num_computed_tokens
        if self.blocks.can_allocate(state, need):
            self.blocks.allocate(state, need)
            return True
        self.drop(state.request_id)
        return False

    def _row(self, state: Sequence) -> ScheduledSequence:
        start = state.num_computed_tokens
        fed = state.token_ids[start:]
        prefill = len(fed) > 1 or start < state.num_prompt_tokens
        return ScheduledSequence(
            request_id=state.request_id,
            token_ids=fed,
            start_pos=start,
            block_table=tuple(state.block_table),
            is_prefill=prefill,
            sample=True,
            sampling=_GREEDY,
            seed=0,
            num_prompt_tokens=state.num_prompt_tokens,
            all_token_ids=state.token_ids,
        )
