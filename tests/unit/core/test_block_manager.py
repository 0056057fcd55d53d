"""BlockManager: exact accounting, reference counts, invariant errors (no torch)."""

from __future__ import annotations

import pytest

from tgi.core.block_manager import BlockManager, BlockManagerError
from tgi.core.sequence import Sequence


def _seq(n: int = 1, rid: str = "a") -> Sequence:
    return Sequence(rid, list(range(n)))


def test_blocks_needed_rounds_up() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    assert [bm.blocks_needed(n) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_allocate_grows_table_exactly_and_uses_block_zero() -> None:
    bm = BlockManager(num_blocks=4, block_size=4)
    seq = _seq(6)
    assert bm.num_new_blocks(seq, 6) == 2
    bm.allocate(seq, 6)
    assert seq.block_table == [0, 1]  # block 0 is an ordinary block
    assert bm.num_free_blocks == 2 and bm.num_used_blocks == 2
    seq.num_computed_tokens = 6
    bm.allocate(seq, 2)  # 8 tokens still fit in two blocks
    assert len(seq.block_table) == 2
    seq.num_computed_tokens = 8
    bm.allocate(seq, 1)  # the 9th takes a third
    assert len(seq.block_table) == 3 and bm.num_free_blocks == 1
    assert all(bm.ref_count(b) == 1 for b in seq.block_table)
    bm.check_invariants()


def test_can_allocate_matches_allocate() -> None:
    bm = BlockManager(num_blocks=2, block_size=4)
    seq = _seq()
    assert bm.can_allocate(seq, 8) and not bm.can_allocate(seq, 9)
    with pytest.raises(BlockManagerError):
        bm.allocate(seq, 9)
    assert seq.block_table == [] and bm.num_free_blocks == 2  # a failed allocate changes nothing
    assert bm.free_token_capacity(seq) == 8


def test_free_returns_every_block_and_double_free_raises() -> None:
    bm = BlockManager(num_blocks=6, block_size=2)
    a, b = _seq(rid="a"), _seq(rid="b")
    bm.allocate(a, 5)
    bm.allocate(b, 3)
    assert bm.num_free_blocks == 1
    table = list(a.block_table)
    bm.free(a)
    assert a.block_table == [] and bm.num_free_blocks == 4
    bm.free(a)  # an empty table frees nothing
    ghost = _seq(rid="ghost")
    ghost.block_table = table  # holds blocks it has no reference to
    with pytest.raises(BlockManagerError, match="double free"):
        bm.free(ghost)
    bm.free(b)
    assert bm.num_free_blocks == bm.num_blocks
    bm.check_invariants()


def test_fork_shares_full_blocks_with_refcounts() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    parent, child = _seq(10, "p"), _seq(10, "c")
    bm.allocate(parent, 10)
    parent.num_computed_tokens = 10
    bm.fork(parent, child)
    # two full blocks shared; the partial third one is not (it would be written by both)
    assert child.block_table == parent.block_table[:2] and child.num_computed_tokens == 8
    assert [bm.ref_count(b) for b in parent.block_table] == [2, 2, 1]
    assert bm.num_used_blocks == 3
    bm.free(parent)
    assert bm.num_used_blocks == 2  # still referenced by the child
    bm.free(child)
    assert bm.num_free_blocks == 8
    bm.check_invariants()
    child.num_computed_tokens = 0
    bm.allocate(child, 1)
    with pytest.raises(BlockManagerError, match="already holds"):
        bm.fork(parent, child)


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        BlockManager(0, 16)
    with pytest.raises(ValueError):
        BlockManager(4, 0)
