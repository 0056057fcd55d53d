"""Paged KV-cache bookkeeping: which physical blocks each sequence owns, and the prefix cache (no torch).

The cache is `num_blocks` blocks of `block_size` tokens. Every block id in [0, num_blocks) is usable: no
block is reserved for padding, because runners pad with slot -1 / masked writes rather than a dummy block
(a runner that needs a scratch block allocates one beyond `num_blocks`).

Blocks carry reference counts: a block is held while its count is above zero, by each sequence whose
`block_table` names it. Counts exceed one when blocks are shared: by `fork`, and by prefix caching.

Prefix caching (`prefix_caching=True`): once a full block's keys/values are computed (`cache_computed`),
the block is entered in an index under its chained hash (`tgi.core.block_hash`). A new sequence takes the
longest chain of indexed blocks that starts its tokens (`match_prefix`, then `allocate(..., prefix)`) and
computes only the rest. A freed block whose contents are indexed is not wiped: it waits in an evictable
list, least recently freed first, and is only reused (its index entry dropped) when the plain free list
is empty. Writes go only to blocks a sequence holds alone and that are not indexed (`allocate` checks),
so a shared block is never written.

Observers (`observers`, e.g. `tgi.core.kv_events.KVEventRecorder`) are told what enters and leaves the index:
`blocks_stored` for each run of blocks a sequence enters (with the hash of the block before them), `blocks_removed`
when an evicted block's entry is dropped, `cache_cleared` when `reset_prefix_cache` empties the index. They
only read; this module knows nothing of what they do with it (a publisher of KV events, say).

Free-block accounting: `num_free_blocks` counts both lists (an evictable block can be handed out at once);
`num_used_blocks` counts blocks with a reference.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Protocol

from tgi.core.block_hash import extend_block_hashes, root_hash
from tgi.core.sequence import Sequence


class BlockManagerError(RuntimeError):
    """An accounting invariant was broken (double free, allocation beyond the free blocks, a write into a
    shared block): a bug."""


@dataclass(frozen=True)
class CachedPrefix:
    """The leading blocks of a sequence found in the prefix cache (`BlockManager.match_prefix`)."""

    block_ids: tuple[int, ...] = ()  # physical blocks, in position order
    num_tokens: int = 0  # tokens they hold: len(block_ids) * block_size


NO_PREFIX = CachedPrefix()


class CacheObserver(Protocol):
    """Told, synchronously and in order, of each change of the prefix-cache index (`BlockManager.observers`)."""

    def blocks_stored(
        self, seq: Sequence, block_hashes: list[bytes], parent_hash: bytes | None, token_ids: list[int]
    ) -> None:
        """`seq`'s full blocks with these chained hashes (position order; `parent_hash`: the hash of the block
        before the first, None for a sequence's first block) entered the index, holding `token_ids`."""

    def blocks_removed(self, block_hashes: list[bytes]) -> None:
        """The blocks with these hashes left the index (evicted to be reused)."""

    def cache_cleared(self) -> None:
        """Every entry of the index was dropped (`reset_prefix_cache`)."""


class BlockManager:
    """Fixed-size KV blocks, a free list, reference counts, and an optional prefix cache.

    Paired check/act calls: `can_allocate(seq, n, prefix)` tells whether `allocate(seq, n, prefix)` will
    succeed; an `allocate` that cannot succeed raises and changes nothing.
    """

    def __init__(
        self, num_blocks: int, block_size: int, prefix_caching: bool = False, namespace: bytes = b""
    ) -> None:
        """`namespace` goes into every block hash (the engine passes the model and revision), so hashes of
        different models never match, should they ever be compared outside this process."""
        if num_blocks < 1:
            raise ValueError(f"the KV cache needs at least one block, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._namespace = namespace
        # FIFO reuse: a freed block goes to the back, so recently freed blocks are reused last.
        self._free: deque[int] = deque(range(num_blocks))  # no reference, no indexed contents
        self._evictable: OrderedDict[int, None] = OrderedDict()  # no reference, indexed; oldest first
        self._ref_counts = [0] * num_blocks
        self._hash_of: list[bytes | None] = [None] * num_blocks  # block -> its hash while indexed
        self._index: dict[bytes, int] = {}  # hash -> block
        self.num_evictions = 0  # indexed blocks reused for other contents, since start
        self.observers: list[CacheObserver] = []  # told of each change of the index

    # ---- counters -----------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks `allocate` can hand out: unreferenced, whether or not their contents are cached."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks whose contents are in the prefix-cache index (held or evictable)."""
        return len(self._index)

    def ref_count(self, block_id: int) -> int:
        return self._ref_counts[block_id]

    def is_cached(self, block_id: int) -> bool:
        return self._hash_of[block_id] is not None

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def num_new_blocks(self, seq: Sequence, num_new_tokens: int, prefix: CachedPrefix = NO_PREFIX) -> int:
        """Blocks `allocate(seq, num_new_tokens, prefix)` would take from the free list, counting the
        prefix blocks that are evictable now (taking one removes it from the free blocks)."""
        if prefix.block_ids:
            total = self.blocks_needed(prefix.num_tokens + num_new_tokens) - len(prefix.block_ids)
            return total + sum(1 for b in prefix.block_ids if self._ref_counts[b] == 0)
        total = self.blocks_needed(seq.num_computed_tokens + num_new_tokens)
        return max(0, total - len(seq.block_table))

    def free_token_capacity(self, seq: Sequence) -> int:
        """The most tokens `seq` can add past `num_computed_tokens` with its blocks plus every free one
        (room in the cache, not the sampling parameter `max_new_tokens`)."""
        capacity = (len(seq.block_table) + self.num_free_blocks) * self.block_size
        return max(0, capacity - seq.num_computed_tokens)

    # ---- prefix cache -------------------------------------------------------------------------------
    def match_prefix(self, seq: Sequence, max_tokens: int | None = None) -> CachedPrefix:
        """The longest chain of indexed blocks that starts `seq`'s tokens, holding at most `max_tokens`
        tokens (default, and never more than, `seq.num_tokens - 1`: the last known token is always fed, so
        that the step computes its logits). Reads only; `allocate(seq, n, prefix)` takes the blocks."""
        if not self.prefix_caching or seq.block_table or seq.num_computed_tokens:
            return NO_PREFIX
        limit = seq.num_tokens - 1 if max_tokens is None else max(0, min(max_tokens, seq.num_tokens - 1))
        hashes = self._hashes(seq, limit // self.block_size)
        blocks: list[int] = []
        for h in hashes[: limit // self.block_size]:
            block_id = self._index.get(h)
            if block_id is None:
                break
            blocks.append(block_id)
        return CachedPrefix(tuple(blocks), len(blocks) * self.block_size) if blocks else NO_PREFIX

    def cache_computed(self, seq: Sequence) -> None:
        """Enter `seq`'s full blocks whose keys/values are computed into the index (call after the step
        that computed them). A block whose hash is already indexed under another block (two sequences
        computed the same prefix at once) stays out: the index keeps the first."""
        if not self.prefix_caching:
            return
        num_full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        hashes = self._hashes(seq, num_full)
        stored: list[int] = []  # positions entered now
        for i in range(seq.num_registered_blocks, num_full):
            block_id = seq.block_table[i]
            if self._hash_of[block_id] is None and hashes[i] not in self._index:
                self._index[hashes[i]] = block_id
                self._hash_of[block_id] = hashes[i]
                stored.append(i)
        seq.num_registered_blocks = max(seq.num_registered_blocks, num_full)
        if self.observers and stored:
            self._tell_stored(seq, hashes, stored)

    def _tell_stored(self, seq: Sequence, hashes: list[bytes], positions: list[int]) -> None:
        """One `blocks_stored` per run of consecutive positions (a block kept out breaks a run)."""
        runs: list[list[int]] = []
        for i in positions:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        size = self.block_size
        for run in runs:
            first, end = run[0], run[-1] + 1
            parent = hashes[first - 1] if first else None
            tokens = list(seq.token_ids[first * size : end * size])
            for observer in self.observers:
                observer.blocks_stored(seq, hashes[first:end], parent, tokens)

    def _hashes(self, seq: Sequence, num_blocks: int) -> list[bytes]:
        if len(seq.block_hashes) < num_blocks:
            # not memoized by key: every client-chosen `cache_salt` would stay in such a table for good
            root = root_hash(self._namespace, seq.cache_key)
            extend_block_hashes(
                seq.block_hashes, seq.token_ids, self.block_size, num_blocks, root, seq.images
            )
        return seq.block_hashes

    # ---- check / act --------------------------------------------------------------------------------
    def can_allocate(self, seq: Sequence, num_new_tokens: int, prefix: CachedPrefix = NO_PREFIX) -> bool:
        return self.num_new_blocks(seq, num_new_tokens, prefix) <= self.num_free_blocks

    def allocate(self, seq: Sequence, num_new_tokens: int, prefix: CachedPrefix = NO_PREFIX) -> None:
        """Grow `seq.block_table` to cover `seq.num_computed_tokens + num_new_tokens` tokens. With a
        `prefix` (from `match_prefix`, for a sequence holding no blocks), the sequence first takes the
        prefix's blocks and starts with their tokens computed. Raises, changing nothing, when the blocks
        to be written are shared or indexed (a scheduler bug) or when too few blocks are free."""
        needed = self.num_new_blocks(seq, num_new_tokens, prefix)
        if needed > self.num_free_blocks:
            raise BlockManagerError(
                f"{seq.request_id}: needs {needed} blocks, {self.num_free_blocks} free "
                "(call can_allocate first)"
            )
        if prefix.block_ids:
            if seq.block_table or seq.num_computed_tokens:
                raise BlockManagerError(
                    f"{seq.request_id}: a cached prefix is taken by a fresh sequence only"
                )
            for block_id in prefix.block_ids:
                if self._hash_of[block_id] is None:
                    raise BlockManagerError(f"block {block_id} is no longer cached (stale prefix)")
            for block_id in prefix.block_ids:
                if self._ref_counts[block_id] == 0:
                    del self._evictable[block_id]
                self._ref_counts[block_id] += 1
                seq.block_table.append(block_id)
            seq.num_computed_tokens = prefix.num_tokens
            seq.num_registered_blocks = len(prefix.block_ids)
        else:
            self._check_writable(seq, num_new_tokens)
        while len(seq.block_table) < self.blocks_needed(seq.num_computed_tokens + num_new_tokens):
            seq.block_table.append(self._take_free_block())

    def _check_writable(self, seq: Sequence, num_new_tokens: int) -> None:
        """The blocks `seq` already holds that the next `num_new_tokens` positions write into must be its
        alone and not indexed: others read shared and indexed blocks."""
        first = seq.num_computed_tokens // self.block_size
        last = min(len(seq.block_table), self.blocks_needed(seq.num_computed_tokens + num_new_tokens))
        for block_id in seq.block_table[first:last]:
            if self._ref_counts[block_id] != 1 or self._hash_of[block_id] is not None:
                raise BlockManagerError(
                    f"{seq.request_id}: would write block {block_id}, which is shared "
                    f"(ref count {self._ref_counts[block_id]}) or cached"
                )

    def _take_free_block(self) -> int:
        if self._free:
            block_id = self._free.popleft()
        else:  # the free list ran dry: evict the least recently freed cached block
            block_id, _ = self._evictable.popitem(last=False)
            evicted = self._hash_of[block_id]
            del self._index[evicted]
            self._hash_of[block_id] = None
            self.num_evictions += 1
            for observer in self.observers:
                observer.blocks_removed([evicted])
        if self._ref_counts[block_id] != 0:
            raise BlockManagerError(f"block {block_id} is on the free list with references")
        self._ref_counts[block_id] = 1
        return block_id

    def free(self, seq: Sequence) -> None:
        """Drop `seq`'s reference to each of its blocks; a block with no references left becomes free
        (evictable, keeping its contents, when it is indexed)."""
        # Reverse order: a sequence's tail blocks (least likely shared as a prefix, and useless without the
        # blocks before them) are freed first, so they are reused or evicted first.
        for block_id in reversed(seq.block_table):
            if self._ref_counts[block_id] <= 0:
                raise BlockManagerError(f"{seq.request_id}: double free of block {block_id}")
            self._ref_counts[block_id] -= 1
            if self._ref_counts[block_id] == 0:
                if self._hash_of[block_id] is not None:
                    self._evictable[block_id] = None
                else:
                    self._free.append(block_id)
        seq.block_table.clear()
        seq.num_registered_blocks = 0

    def reset_prefix_cache(self) -> int:
        """Empty the prefix-cache index: evictable blocks become plain free blocks, and blocks sequences still
        hold stay theirs, unindexed (no later sequence reads them; they are freed as uncached). Returns the
        entries dropped. Observers are told `cache_cleared` even when the index was empty already."""
        dropped = len(self._index)
        for block_id in self._evictable:
            self._free.append(block_id)
        self._evictable.clear()
        self._index.clear()
        self._hash_of = [None] * self.num_blocks
        for observer in self.observers:
            observer.cache_cleared()
        return dropped

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
        """Raise if the free lists, the reference counts and the index disagree (tests and debugging)."""
        free, evictable = set(self._free), set(self._evictable)
        if len(free) != len(self._free):
            raise BlockManagerError("a block is on the free list twice")
        if free & evictable:
            raise BlockManagerError(f"blocks {sorted(free & evictable)} are both free and evictable")
        for block_id, count in enumerate(self._ref_counts):
            unheld = block_id in free or block_id in evictable
            if count < 0 or (count == 0) != unheld:
                raise BlockManagerError(f"block {block_id}: ref count {count}, free={unheld}")
            h = self._hash_of[block_id]
            if (block_id in evictable or h is not None) and (h is None or self._index.get(h) != block_id):
                raise BlockManagerError(f"block {block_id}: cached state and index disagree")
        if len(self._index) != sum(h is not None for h in self._hash_of):
            raise BlockManagerError("the index names a block that does not carry its hash")
        if not self.prefix_caching and self._index:
            raise BlockManagerError("blocks are indexed with prefix caching off")
