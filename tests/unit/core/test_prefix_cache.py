"""Prefix caching in the BlockManager: hash chains, sharing, LRU eviction, no write into a shared block,
and exact accounting over thousands of random operations (no torch)."""

from __future__ import annotations

import random

import pytest

from tgi.core.block_hash import block_hash, extend_block_hashes, root_hash
from tgi.core.block_manager import NO_PREFIX, BlockManager, BlockManagerError
from tgi.core.sequence import Sequence

BS = 4


def _bm(num_blocks: int = 16) -> BlockManager:
    return BlockManager(num_blocks, BS, prefix_caching=True, namespace=b"model@rev")


def _computed(bm: BlockManager, rid: str, tokens: list[int], cache_key: bytes = b"") -> Sequence:
    """A sequence that took what the cache had, then computed the rest of its tokens."""
    seq = Sequence(rid, tokens, cache_key=cache_key)
    prefix = bm.match_prefix(seq)
    n = len(tokens) - prefix.num_tokens
    bm.allocate(seq, n, prefix)
    seq.num_computed_tokens += n
    bm.cache_computed(seq)
    return seq


# ---- hash chains ------------------------------------------------------------------------------------
def test_hashes_chain_over_the_whole_prefix() -> None:
    root = root_hash(b"m", b"")
    a, b = [], []
    extend_block_hashes(a, [1, 2, 3, 4, 5, 6, 7, 8, 9], BS, 10, root)
    extend_block_hashes(b, [0, 2, 3, 4, 5, 6, 7, 8], BS, 10, root)
    assert len(a) == 2 and len(b) == 2  # full blocks only: the 9th token's block is partial
    assert a[0] != b[0] and a[1] != b[1]  # equal second blocks, different parents: different hashes
    assert a[1] == block_hash(a[0], [5, 6, 7, 8])
    again: list[bytes] = []
    extend_block_hashes(again, [1, 2, 3, 4, 5, 6, 7, 8], BS, 1, root)
    assert again == a[:1]  # stops at num_blocks; deterministic across calls
    extend_block_hashes(again, [1, 2, 3, 4, 5, 6, 7, 8], BS, 5, root)
    assert again == a  # grows where it stopped
    # everything besides the tokens that changes the keys/values changes the root, so every hash
    assert len({root_hash(b"m", b""), root_hash(b"m", b"lora-1"), root_hash(b"m2", b""), root}) == 3
    assert root_hash(b"ab", b"c") != root_hash(b"a", b"bc")
    assert len(a[0]) == 32  # SHA-256


def test_cache_key_and_namespace_separate_requests() -> None:
    bm = _bm()
    _computed(bm, "a", list(range(9)), cache_key=b"adapter-1")
    assert bm.match_prefix(Sequence("b", list(range(9)))) is NO_PREFIX
    assert bm.match_prefix(Sequence("c", list(range(9)), cache_key=b"adapter-1")).num_tokens == 8
    other = BlockManager(16, BS, prefix_caching=True, namespace=b"other-model")
    seq = Sequence("d", list(range(9)))
    assert other._hashes(seq, 2) != bm._hashes(Sequence("e", list(range(9))), 2)


# ---- sharing ----------------------------------------------------------------------------------------
def test_a_new_sequence_takes_the_longest_cached_chain_and_shares_it() -> None:
    bm = _bm()
    a = _computed(bm, "a", list(range(14)))  # 3 full blocks + 2 tokens
    assert bm.num_cached_blocks == 3 and bm.num_used_blocks == 4
    b = Sequence("b", [*range(8), 99, 98, 97, 96, 95])  # shares the first two blocks only
    prefix = bm.match_prefix(b)
    assert prefix.block_ids == tuple(a.block_table[:2]) and prefix.num_tokens == 8
    assert bm.can_allocate(b, 5, prefix) and bm.num_new_blocks(b, 5, prefix) == 2
    bm.allocate(b, 5, prefix)
    assert b.num_computed_tokens == 8 and b.block_table[:2] == a.block_table[:2]
    assert [bm.ref_count(x) for x in a.block_table] == [2, 2, 1, 1]
    assert bm.num_used_blocks == 6  # 4 + b's two new ones
    b.num_computed_tokens = 13
    bm.cache_computed(b)  # b's own third block joins the index
    assert bm.num_cached_blocks == 4
    bm.check_invariants()
    bm.free(a)
    assert [bm.ref_count(x) for x in b.block_table[:2]] == [1, 1]  # b keeps the shared blocks alive
    bm.free(b)
    assert bm.num_free_blocks == bm.num_blocks and bm.num_cached_blocks == 4  # cached, yet all free
    bm.check_invariants()


def test_a_fully_cached_prompt_still_feeds_its_last_token_in_a_block_of_its_own() -> None:
    bm = _bm()
    a = _computed(bm, "a", list(range(8)))  # two full blocks, both cached
    b = Sequence("b", list(range(8)))
    prefix = bm.match_prefix(b)
    assert prefix.num_tokens == 4  # not 8: the last token's block is recomputed, never written shared
    bm.allocate(b, 4, prefix)
    assert b.block_table[0] == a.block_table[0] and b.block_table[1] != a.block_table[1]
    b.num_computed_tokens = 8
    bm.cache_computed(b)  # same hash as a's second block: the index keeps a's
    assert bm.num_cached_blocks == 2 and not bm.is_cached(b.block_table[1])
    assert bm.match_prefix(Sequence("c", list(range(8))), max_tokens=0) is NO_PREFIX
    bm.free(b)
    bm.free(a)
    bm.check_invariants()


def test_prefix_caching_off_caches_nothing() -> None:
    bm = BlockManager(8, BS)
    a = Sequence("a", list(range(9)))
    bm.allocate(a, 9)
    a.num_computed_tokens = 9
    bm.cache_computed(a)
    assert bm.num_cached_blocks == 0 and bm.match_prefix(Sequence("b", list(range(9)))) is NO_PREFIX
    bm.free(a)
    bm.check_invariants()


# ---- eviction ---------------------------------------------------------------------------------------
def test_free_blocks_go_first_then_cached_ones_least_recently_freed_first() -> None:
    bm = _bm(num_blocks=6)
    a = _computed(bm, "a", list(range(8)))  # blocks 0 1, cached
    b = _computed(bm, "b", list(range(100, 108)))  # blocks 2 3, cached
    bm.free(b)  # freed first: b's tail (3) then b's head (2)
    bm.free(a)  # then 1, 0
    assert bm.num_free_blocks == 6 and bm.num_cached_blocks == 4
    c = Sequence("c", list(range(200, 212)))
    bm.allocate(c, 12)  # 3 blocks: the two never used, then the oldest cached one
    assert c.block_table == [4, 5, 3] and bm.num_evictions == 1
    assert bm.match_prefix(Sequence("b2", list(range(100, 109)))).block_ids == (2,)  # 2 left, 3 gone
    d = Sequence("d", list(range(300, 308)))
    bm.allocate(d, 8)
    assert d.block_table == [2, 1] and bm.num_evictions == 3  # then b's head, then a's tail
    assert bm.match_prefix(Sequence("a2", list(range(9)))).block_ids == (0,)
    bm.check_invariants()


def test_taking_a_cached_block_removes_it_from_eviction() -> None:
    bm = _bm(num_blocks=3)
    a = _computed(bm, "a", list(range(9)))  # blocks 0 1 cached, 2 partial
    bm.free(a)
    b = Sequence("b", [*range(4), 50, 51])
    prefix = bm.match_prefix(b)
    assert prefix.block_ids == (0,) and bm.num_new_blocks(b, 2, prefix) == 2  # block 0 leaves the free
    bm.allocate(b, 2, prefix)
    c = Sequence("c", [7])
    bm.allocate(c, 1)
    assert bm.num_free_blocks == 0 and 0 in b.block_table and 0 not in c.block_table
    assert not bm.can_allocate(Sequence("d", [1]), 1)
    bm.check_invariants()


def test_a_stale_prefix_is_refused() -> None:
    bm = _bm(num_blocks=2)
    a = _computed(bm, "a", list(range(5)))
    bm.free(a)
    prefix = bm.match_prefix(Sequence("b", list(range(5))))
    x = Sequence("x", list(range(8)))
    bm.allocate(x, 8)  # evicts block 0 (and 1)
    bm.free(x)
    with pytest.raises(BlockManagerError, match="no longer cached"):
        bm.allocate(Sequence("b", list(range(5))), 1, prefix)


# ---- never written while shared ---------------------------------------------------------------------
def test_writing_a_shared_or_cached_block_raises_and_changes_nothing() -> None:
    bm = _bm()
    a = _computed(bm, "a", list(range(9)))
    b = Sequence("b", list(range(9)))
    bm.allocate(b, 1, bm.match_prefix(b))
    b.num_computed_tokens = 6  # as if b would rewrite positions 6.. of the shared second block
    before = (list(b.block_table), bm.num_free_blocks)
    with pytest.raises(BlockManagerError, match="shared"):
        bm.allocate(b, 3)
    assert (list(b.block_table), bm.num_free_blocks) == before
    bm.free(b)
    a.num_computed_tokens = 4  # a alone holds block 1 now, but it is cached: still not writable
    with pytest.raises(BlockManagerError, match="cached"):
        bm.allocate(a, 1)


# ---- random operations ------------------------------------------------------------------------------
PREFIXES = [[1000 + i for i in range(n)] for n in (0, 4, 9, 16)]


def _random_tokens(rng: random.Random) -> list[int]:
    return rng.choice(PREFIXES) + [rng.randrange(6) for _ in range(rng.randint(1, 10))]


@pytest.mark.parametrize("seed", range(3))
def test_exact_accounting_and_contents_after_thousands_of_random_operations(seed: int) -> None:
    """Admissions (taking cached prefixes), prefill chunks, decodes, finishes, preemptions and
    cancellations in random order. After every operation: each block's ref count equals the number of
    live tables naming it, free + used blocks add up exactly, and every block a sequence reads holds that
    sequence's own tokens (a model of the KV contents, written only into exclusive, uncached blocks)."""
    rng = random.Random(seed)
    bm = BlockManager(24, BS, prefix_caching=True)
    contents: dict[int, list[int | None]] = {b: [None] * BS for b in range(bm.num_blocks)}
    live: list[Sequence] = []
    hits = evictions_seen = 0

    def write(seq: Sequence, n: int) -> None:
        for pos in range(seq.num_computed_tokens, seq.num_computed_tokens + n):
            block = seq.block_table[pos // BS]
            assert bm.ref_count(block) == 1 and not bm.is_cached(block), "write into a shared block"
            contents[block][pos % BS] = seq.token_ids[pos]
        seq.num_computed_tokens += n
        bm.cache_computed(seq)

    for op in range(4000):
        kind = rng.random()
        if kind < 0.3 or not live:  # admit
            seq = Sequence(f"s{op}", _random_tokens(rng), cache_key=rng.choice((b"", b"", b"t2")))
            prefix = bm.match_prefix(seq)
            n = rng.randint(1, seq.num_tokens - prefix.num_tokens)
            if bm.can_allocate(seq, n, prefix):
                bm.allocate(seq, n, prefix)
                hits += prefix.num_tokens
                write(seq, n)
                live.append(seq)
            else:
                with pytest.raises(BlockManagerError):
                    bm.allocate(seq, n, prefix)
        elif kind < 0.75:  # a prefill chunk or a decode
            seq = rng.choice(live)
            if seq.num_uncomputed_tokens == 0:
                seq.append_token(rng.randrange(6))
            n = rng.randint(1, seq.num_uncomputed_tokens)
            if bm.can_allocate(seq, n):
                bm.allocate(seq, n)
                write(seq, n)
        else:  # finish, cancel or preempt: every way out frees the same
            seq = live.pop(rng.randrange(len(live)))
            bm.free(seq)
            seq.num_computed_tokens = 0
            assert seq.block_table == [] and seq.num_registered_blocks == 0
        bm.check_invariants()
        held: dict[int, int] = {}
        for s in live:
            assert len(set(s.block_table)) == len(s.block_table)
            for b in s.block_table:
                held[b] = held.get(b, 0) + 1
            for pos in range(s.num_computed_tokens):  # what attention would read back
                assert contents[s.block_table[pos // BS]][pos % BS] == s.token_ids[pos]
        assert all(bm.ref_count(b) == held.get(b, 0) for b in range(bm.num_blocks))
        assert bm.num_used_blocks == len(held) and bm.num_free_blocks == bm.num_blocks - len(held)
        evictions_seen = bm.num_evictions
    assert hits > 500 and evictions_seen > 50  # the run exercised sharing and eviction
    for seq in live:
        bm.free(seq)
    assert bm.num_free_blocks == bm.num_blocks and bm.num_used_blocks == 0
    bm.check_invariants()
