"""The scheduler tests' model runner: a fake paged "model" that writes each fed token into the KV slot its
block table names and predicts the next token from every earlier token read back through the block table.
So a wrong block table, a block shared by two live sequences, a cached block with the wrong contents or a bad
recomputation changes the outputs (or trips an assertion), and comparing runs catches it."""

from __future__ import annotations

from tgi.core.block_manager import BlockManager
from tgi.core.interfaces.batch import ScheduledBatch, StepOutput

VOCAB = 1000


class FakePagedModel:
    """Next token = hash of every earlier token, read back from the paged cache.

    A slot holds (request id, position, token). Every read checks the position, and the token against the
    sequence's own history. Without `block_manager`, a read also checks that this sequence wrote the slot
    (no block is shared); with it (prefix caching: a cached block was written by another request), a write
    must land in a block that only this sequence holds and that is not cached.
    `prompt_logprob_positions`: per request, the prompt positions whose logprobs were returned.
    """

    def __init__(self, num_blocks: int, block_size: int, block_manager: BlockManager | None = None) -> None:
        self.block_size = block_size
        self.block_manager = block_manager
        self.slots: list[tuple[str, int, int] | None] = [None] * (num_blocks * block_size)
        self.prompt_logprob_positions: dict[str, list[int]] = {}

    def _slot(self, table, pos: int) -> int:
        return table[pos // self.block_size] * self.block_size + pos % self.block_size

    def _store(self, s, pos: int, tok: int) -> None:
        bm = self.block_manager
        if bm is not None:
            block = s.block_table[pos // self.block_size]
            assert bm.ref_count(block) == 1 and not bm.is_cached(block), "shared write"
        self.slots[self._slot(s.block_table, pos)] = (s.request_id, pos, tok)

    def _load(self, s, pos: int) -> int:
        rid, p, tok = self.slots[self._slot(s.block_table, pos)]
        if self.block_manager is None:
            assert (rid, p) == (s.request_id, pos), "KV slot overwritten by another sequence"
        assert p == pos, f"{s.request_id}: the slot of position {pos} holds position {p}"
        if pos < len(s.all_token_ids):  # a guess (speculative decoding) is in no history yet
            assert tok == s.all_token_ids[pos], f"{s.request_id}: wrong KV at position {pos}"
        return tok

    def execute(self, batch: ScheduledBatch) -> StepOutput:
        out = StepOutput([], [], [])
        for s in batch.sequences:
            assert len(s.block_table) * self.block_size >= s.start_pos + s.num_tokens
            for i, tok in enumerate(s.token_ids):
                self._store(s, s.start_pos + i, tok)
            if s.want_prompt_logprobs:
                end = min(s.start_pos + s.num_tokens, s.num_prompt_tokens - 1)
                positions = list(range(s.start_pos + 1, end + 1))
                self.prompt_logprob_positions.setdefault(s.request_id, []).extend(positions)
                out.prompt_logprobs[s.request_id] = [-1.0] * len(positions)
            if s.sample:
                h = 0
                for pos in range(s.start_pos + s.num_tokens):
                    h = (h * 31 + self._load(s, pos) + 1) % 1_000_003
                out.request_ids.append(s.request_id)
                out.token_ids.append(h % VOCAB)
                out.logprobs.append(-0.5)
        return out
