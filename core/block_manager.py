"""Paged KV-cache bookkeeping: which physical blocks each sequence owns (no torch here).

The cache is `num_blocks` blocks of `block_size` tokens. Every block id in [0, num_blocks) is usable: no
block is reserved for padding, because runners pad with slot -1 / masked writes rather than a dummy block
(a runner that needs a scratch block allocates one beyond `num_blocks`).

Blocks carry reference counts so that prefix sharing and forking (parallel sampling) can share full blocks
later; today `fork` is the only way a count exceeds one. A block is free exactly when its count is zero.
"""

from __future__ import annotations

from collections import deque

from tgi.core.sequence import Sequence


class BlockManagerError(RuntimeError):
    """An accounting invariant was broken (double free, allocation beyond the free blocks): a bug."""


class BlockManager:
    """Fixed-size KV blocks, a free list and reference counts.

    Paired check/act calls: `can_allocate(seq, n)` tells whether `allocate(seq, n)` will succeed; an
    `allocate` that cannot succeed raises and changes nothing.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"the KV cache needs at least one block, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # FIFO reuse: a freed block goes to the back, so recently freed blocks are reused last.
        self._free: deque[int] = deque(range(num_blocks))
        self._ref_counts = [0] * num_blocks

    # ---- counters -----------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def num_new_blocks(self, seq: Sequence, num_new_tokens: int) -> int:
        """Blocks `allocate(seq, num_new_tokens)` would take from the free list."""
        total = self.blocks_needed(seq.num_computed_tokens + num_new_tokens)
        return max(0, total - len(seq.block_table))

    def free_token_capacity(self, seq: Sequence) -> int:
        """The most tokens `seq` can add past `num_computed_tokens` with its blocks plus every free one
        (room in the cache, not the sampling parameter `max_new_tokens`)."""
        capacity = (len(seq.block_table) + len(self._free)) * self.block_size
        return max(0, capacity - seq.num_computed_tokens)

    # ---- check / act --------------------------------------------------------------------------------
    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.num_new_blocks(seq, num_new_tokens) <= len(self._free)

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        """Grow `seq.block_table` to cover `seq.num_computed_tokens + num_new_tokens` tokens."""
        needed = self.num_new_blocks(seq, num_new_tokens)
        if needed > len(self._free):
            raise BlockManagerError(
                f"{seq.request_id}: needs {needed} blocks, {len(self._free)} free (call can_allocate first)"
            )
        for _ in range(needed):
            block_id = self._free.popleft()
            if self._ref_counts[block_id] != 0:
                raise BlockManagerError(f"block {block_id} is on the free list with references")
            self._ref_counts[block_id] = 1
            seq.block_table.append(block_id)

    def free(self, seq: Sequence) -> None:
        """Drop `seq`'s reference to each of its blocks; a block with no references left becomes free."""
        # Reverse order: the tail blocks (least likely shared as a prefix) go back to the free list first.
        for block_id in reversed(seq.block_table):
            if self._ref_counts[block_id] <= 0:
                raise BlockManagerError(f"{seq.request_id}: double free of block {block_id}")
            self._ref_counts[block_id] -= 1
            if self._ref_counts[block_id] == 0:
                self._free.append(block_id)
        seq.block_table.clear()

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Share `parent`'s full, computed blocks with `child` (which must hold none): the child starts
        with those tokens computed. Partial blocks are not shared: both would write into them, which needs
        copy-on-write (not implemented), so the child recomputes the tail."""
        if child.block_table:
            raise BlockManagerError(f"{child.request_id}: fork target already holds blocks")
        num_full = parent.num_computed_tokens // self.block_size
        shared = parent.block_table[:num_full]
        for block_id in shared:
            self._ref_counts[block_id] += 1
        child.block_table.extend(shared)
        child.num_computed_tokens = num_full * self.block_size

    def check_invariants(self) -> None:
        """Raise if the free list and the reference counts disagree (tests and debugging)."""
        free = set(self._free)
        if len(free) != len(self._free):
            raise BlockManagerError("a block is on the free list twice")
        for block_id, count in enumerate(self._ref_counts):
            if count < 0 or (count == 0) != (block_id in free):
                raise BlockManagerError(f"block {block_id}: ref count {count}, free={block_id in free}")
