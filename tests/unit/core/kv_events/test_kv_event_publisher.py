"""The ZMQ publisher with a subscriber declared from vLLM's definitions: three frames per batch, sequence
numbers from 0 without gaps, the topic, and the replay socket's answer (over ipc sockets in a temporary
folder: no port is taken)."""

from __future__ import annotations

import pytest
import vllm_kv_events as vllm

from tgi.core.kv_events import BlockRemoved, BlockStored, KVEventsConfig
from tgi.core.kv_events.publisher import ZmqEventPublisher

H = bytes(range(32))


@pytest.fixture
def pair(tmp_path):
    endpoint, replay = f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay"
    config = KVEventsConfig(True, "zmq", endpoint, replay, buffer_steps=3, topic="kv")
    publisher = ZmqEventPublisher(config)
    subscriber = vllm.Subscriber(endpoint, "kv", replay)
    yield publisher, subscriber
    subscriber.close()
    publisher.close()


def _wait_until_subscribed(publisher: ZmqEventPublisher, subscriber: vllm.Subscriber) -> int:
    """A PUB socket drops what it sends before a subscription reaches it: publish probes until one arrives
    (the subscription is then in place); returns the next sequence number."""
    while True:
        publisher.publish(0.0, [BlockRemoved([H], "GPU")])
        got = subscriber.receive(timeout_s=1.0)
        if got is not None:
            seq = got[0]
            while (got := subscriber.receive(timeout_s=1.0)) is not None:  # probes still on their way
                seq = got[0]
            return seq + 1


def test_batches_arrive_in_order_without_gaps_and_replay_from_a_start(pair) -> None:
    publisher, subscriber = pair
    first = _wait_until_subscribed(publisher, subscriber)
    for i in range(4):
        publisher.publish(float(i), [BlockStored([H], None, [i] * 4, 4, None, "GPU")])
    got = subscriber.receive_until(lambda b: len(b) == 4)
    assert [seq for seq, _ in got] == list(range(first, first + 4))
    assert [batch.events[0].token_ids for _, batch in got] == [[i] * 4 for i in range(4)]
    assert all(batch.data_parallel_rank == 0 for _, batch in got)
    # the buffer keeps the last three batches: a start before them gets those three
    replayed = subscriber.replay(0)
    assert [seq for seq, _ in replayed] == list(range(first + 1, first + 4))
    assert [b.events[0].token_ids for _, b in replayed] == [[i] * 4 for i in range(1, 4)]
    assert subscriber.replay(first + 3)[0][0] == first + 3
    assert subscriber.replay(first + 4) == []  # nothing past the last
