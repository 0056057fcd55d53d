"""The block manager's observers: told of every block entering and leaving the prefix-cache index, and of
its reset, with the hashes of the index itself (no torch, no zmq)."""

from __future__ import annotations

from tgi.core.block_hash import extend_block_hashes, root_hash
from tgi.core.block_manager import BlockManager
from tgi.core.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventRecorder
from tgi.core.sampling_params import SamplingParams
from tgi.core.sequence import Sequence

BS = 4


def _run(bm: BlockManager, seq: Sequence) -> None:
    """Admit `seq` (taking its cached prefix), compute its whole prompt, enter its full blocks."""
    prefix = bm.match_prefix(seq)
    bm.allocate(seq, seq.num_tokens - prefix.num_tokens, prefix)
    seq.num_computed_tokens = seq.num_tokens
    bm.cache_computed(seq)


def _chain(tokens: list[int], namespace: bytes = b"m") -> list[bytes]:
    hashes: list[bytes] = []
    extend_block_hashes(hashes, tokens, BS, len(tokens) // BS, root_hash(namespace, b""))
    return hashes


def _manager(num_blocks: int = 16) -> tuple[BlockManager, KVEventRecorder]:
    bm = BlockManager(num_blocks, BS, prefix_caching=True, namespace=b"m")
    recorder = KVEventRecorder(BS, lambda seq: None)
    bm.observers.append(recorder)
    return bm, recorder


def test_stored_blocks_carry_the_index_chain_and_their_tokens() -> None:
    bm, recorder = _manager()
    tokens = list(range(100, 110))  # two full blocks and a partial one
    _run(bm, Sequence("a", tokens))
    [event] = recorder.drain()
    chain = _chain(tokens)
    assert event == BlockStored(chain, None, tokens[:8], BS, None, "GPU")
    assert all(bm.is_cached(b) for b in (0, 1)) and bm.num_cached_blocks == 2
    assert recorder.drain() == []  # drained once


def test_a_shared_prefix_stores_only_the_new_blocks_with_their_parent() -> None:
    bm, recorder = _manager()
    system = list(range(8))
    _run(bm, Sequence("a", [*system, 50, 51, 52, 53, 54]))
    recorder.drain()
    second = [*system, 60, 61, 62, 63, 64]
    _run(bm, Sequence("b", second))
    [event] = recorder.drain()
    chain = _chain(second)
    assert event.block_hashes == [chain[2]]  # the two system blocks were read from the cache
    assert event.parent_block_hash == chain[1]
    assert event.token_ids == [60, 61, 62, 63]


def test_an_evicted_block_is_removed_by_its_hash() -> None:
    bm, recorder = _manager(num_blocks=3)
    first = Sequence("a", list(range(9)))  # two full blocks and one partial: all three blocks
    _run(bm, first)
    stored = recorder.drain()[0].block_hashes
    bm.free(first)  # the two full blocks wait, evictable; the partial one is plain free
    _run(bm, Sequence("b", list(range(200, 209))))
    events = recorder.drain()
    # the free block first, then the cached ones, least recently freed first (a sequence frees its tail first)
    assert events[0] == BlockRemoved([stored[1], stored[0]], "GPU")
    assert isinstance(events[1], BlockStored)
    bm.check_invariants()


def test_evictions_of_one_step_are_one_event() -> None:
    bm, recorder = _manager(num_blocks=4)
    seq = Sequence("a", list(range(16)))
    _run(bm, seq)
    stored = recorder.drain()[0].block_hashes
    bm.free(seq)
    bm.allocate(Sequence("b", list(range(300, 309))), 9)  # three blocks, all evicted ones
    assert recorder.drain() == [BlockRemoved([stored[3], stored[2], stored[1]], "GPU")]


def test_reset_clears_the_index_and_says_so() -> None:
    bm, recorder = _manager()
    held, done = Sequence("a", list(range(9))), Sequence("b", list(range(50, 58)))
    _run(bm, held)
    _run(bm, done)
    bm.free(done)
    recorder.drain()
    assert bm.reset_prefix_cache() == 4
    assert recorder.drain() == [AllBlocksCleared()]
    assert bm.num_cached_blocks == 0 and bm.match_prefix(Sequence("c", list(range(9)))).num_tokens == 0
    assert bm.num_free_blocks == 16 - 3  # the held sequence keeps its blocks
    bm.check_invariants()
    bm.free(held)  # its blocks come back as plain free blocks
    assert bm.num_free_blocks == 16
    bm.check_invariants()


def test_a_block_kept_out_of_the_index_splits_the_stored_runs() -> None:
    bm, recorder = _manager()
    tokens = list(range(12))
    a, b = Sequence("a", tokens), Sequence("b", tokens)
    # both computed the same prompt at once: only a's blocks are indexed, b's are kept out
    for seq in (a, b):
        bm.allocate(seq, 12)
        seq.num_computed_tokens = 12
    bm.cache_computed(a)
    bm.cache_computed(b)
    [event] = recorder.drain()
    assert event.block_hashes == _chain(tokens)
    # a recorder sees nothing for blocks that did not enter the index
    assert bm.num_cached_blocks == 3


def test_the_lora_id_comes_from_the_engine_and_the_name_from_the_request() -> None:
    bm = BlockManager(8, BS, prefix_caching=True)
    recorder = KVEventRecorder(BS, lambda seq: 7 if seq.request_id == "lora" else None)
    bm.observers.append(recorder)
    params = SamplingParams(adapter_id="sql")
    _run(bm, Sequence("lora", list(range(5)), params, cache_key=b"adapter"))
    [event] = recorder.drain()
    assert (event.lora_id, event.lora_name, event.block_size) == (7, "sql", BS)
