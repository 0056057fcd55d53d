"""KV cache events from a real `tgi launch --kv-events-config`, read over ZMQ by a subscriber declared from
vLLM's definitions (tests/helpers/vllm_kv_events.py): requests with a shared prefix store blocks whose hashes
are the block manager's chain over the prompt's tokens, sequence numbers have no gap, a subscriber that went
away gets the batches it missed from the replay socket, `/flush_cache` clears them all. Both sockets are ipc
sockets in the test's folder (no port to take); the default model, one server for the module."""

from __future__ import annotations

import itertools

import httpx
import pytest
import vllm_kv_events as vllm

from tgi.core.block_hash import block_hash, root_hash

BS = 16  # the default block size
_fresh = itertools.count(100)  # each prompt's tokens start at the next 100 (the vocabulary has 49,152)


@pytest.fixture(scope="module")
def events_server(launch_server, stop_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("kv-events-e2e")
    pub, replay = f"ipc://{root}/kv-events", f"ipc://{root}/kv-replay"
    config = (
        '{"enable_kv_cache_events": true, "publisher": "zmq", '
        f'"endpoint": "{pub}", "replay_endpoint": "{replay}", "topic": "kv", "buffer_steps": 1000}}'
    )
    s = launch_server(root, "--kv-events-config", config, "--dtype", "float32")
    s.pub, s.replay = pub, replay
    yield s
    code = stop_server(s)
    assert code == 0, f"the server exited with {code} on SIGTERM:\n{s.logs()}"


def _complete(url: str, tokens: list[int]) -> int:
    """One token for a prompt of token ids; the prompt tokens read from the prefix cache."""
    r = httpx.post(
        url + "/v1/completions",
        json={"model": "tgi", "prompt": tokens, "max_tokens": 1, "temperature": 0},
        timeout=120,
    )
    r.raise_for_status()
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def _unique(n: int) -> list[int]:
    """`n` (< 100) token ids no earlier prompt of this module started with."""
    start = next(_fresh) * 100
    return [start + i for i in range(n)]


def _subscribed(server) -> vllm.Subscriber:
    """A subscriber whose subscription has reached the PUB socket: prompts of fresh tokens are sent until one's
    batch arrives (a PUB socket drops what it sends before then), and what is on its way is read."""
    sub = vllm.Subscriber(server.pub, "kv", server.replay)
    while True:
        _complete(server.url, _unique(2 * BS))
        if sub.receive(timeout_s=2.0) is not None:
            while sub.receive(timeout_s=1.0) is not None:
                pass
            return sub


def _stored(batches) -> list[vllm.BlockStored]:
    return [e for _, b in batches for e in b.events if isinstance(e, vllm.BlockStored)]


def _root(server) -> bytes:
    """The chain's root as the engine makes it from its namespace, `{--model-id}@{--revision}:{dtype}`: the
    launch gives neither flag (the default model), so both are None; no cache key (no adapter, salt, tenant)."""
    dtype = httpx.get(server.url + "/info").json()["model_dtype"]
    return root_hash(f"None@None:{dtype}".encode(), b"")


def _chain(root: bytes, tokens: list[int]) -> list[bytes]:
    hashes: list[bytes] = []
    for i in range(len(tokens) // BS):
        hashes.append(block_hash(hashes[-1] if hashes else root, tokens[i * BS : (i + 1) * BS]))
    return hashes


def test_shared_prefix_blocks_carry_the_block_managers_chain(events_server) -> None:
    sub = _subscribed(events_server)
    try:
        prefix = _unique(4 * BS)
        first = [*prefix, *_unique(2 * BS + 5)]
        second = [*prefix, *_unique(3 * BS + 1)]
        assert _complete(events_server.url, first) == 0
        got = sub.receive_until(lambda b: len(_stored(b)) >= 1)
        assert _complete(events_server.url, second) == 4 * BS
        got += sub.receive_until(lambda b: len(_stored(b)) >= 1)
    finally:
        sub.close()
    one, two = _stored(got)
    chain_one, chain_two = _chain(_root(events_server), first), _chain(_root(events_server), second)
    assert one.block_hashes == chain_one and one.parent_block_hash is None
    assert one.token_ids == first[: 6 * BS] and one.block_size == BS
    assert (one.lora_id, one.lora_name, one.medium) == (None, None, "GPU")
    # the second prompt read the prefix's four blocks from the cache: it stores only its own, after them
    assert two.block_hashes == chain_two[4:] and two.parent_block_hash == chain_one[3]
    assert two.token_ids == second[4 * BS : 7 * BS]
    seqs = [seq for seq, _ in got]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gap
    assert all(b.data_parallel_rank == 0 for _, b in got)


def test_replay_returns_what_a_subscriber_missed_and_flush_clears(events_server) -> None:
    sub = _subscribed(events_server)
    try:
        _complete(events_server.url, _unique(3 * BS))
        last = sub.receive_until(lambda b: len(_stored(b)) >= 1)[-1][0]
    finally:
        sub.close()
    missed = _unique(5 * BS)  # sent while no one listens
    _complete(events_server.url, missed)
    back = vllm.Subscriber(events_server.pub, "kv", events_server.replay)
    try:
        replayed = back.replay(last + 1)
        assert [seq for seq, _ in replayed] == list(range(last + 1, last + 1 + len(replayed)))
        [stored] = _stored(replayed)
        assert stored.token_ids == missed and stored.block_hashes == _chain(_root(events_server), missed)
        # everything from the first batch on is still buffered (1000 steps), numbered from 0 without a gap
        assert [seq for seq, _ in back.replay(0)] == list(range(last + 1 + len(replayed)))
        while True:  # the flush's batch is published at once; wait for the subscription as above
            r = httpx.post(events_server.url + "/flush_cache", timeout=60)
            assert r.status_code == 200 and r.json()["flushed_blocks"] > 0
            got = back.receive(timeout_s=2.0)
            if got is not None:
                break
        assert got[1].events == [vllm.AllBlocksCleared()]
        assert _complete(events_server.url, missed) == 0  # nothing is read from the cache any more
    finally:
        back.close()
