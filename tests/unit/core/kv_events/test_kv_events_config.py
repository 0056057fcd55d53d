"""`--kv-events-config`: vLLM's keys and defaults, anything else refused by name."""

from __future__ import annotations

import pytest

from tgi.core.config import ConfigError
from tgi.core.kv_events import KVEventsConfig


def test_vllm_defaults_and_the_publisher_that_follows_enable() -> None:
    on = KVEventsConfig.from_json('{"enable_kv_cache_events": true}')
    assert on.publisher == "zmq" and on.publishes
    assert (on.endpoint, on.replay_endpoint, on.topic) == ("tcp://*:5557", None, "")
    assert (on.buffer_steps, on.hwm, on.max_queue_size) == (10_000, 100_000, 100_000)
    off = KVEventsConfig.from_json("{}")
    assert off.publisher == "null" and not off.publishes
    null = KVEventsConfig.from_json('{"enable_kv_cache_events": true, "publisher": "null"}')
    assert null.enable_kv_cache_events and not null.publishes


def test_every_key_is_read() -> None:
    config = KVEventsConfig.from_json(
        '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "ipc:///tmp/e", '
        '"replay_endpoint": "tcp://127.0.0.1:5558", "buffer_steps": 5, "hwm": 0, "max_queue_size": 2, '
        '"topic": "kv"}'
    )
    assert config == KVEventsConfig(True, "zmq", "ipc:///tmp/e", "tcp://127.0.0.1:5558", 5, 0, 2, "kv")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"enable_kv_cache_events": true, "publisher": "kafka"}', "publisher"),
        ('{"enable_kv_cache_events": true, "endpoint": "http://x:1"}', "endpoint"),
        ('{"enable_kv_cache_events": true, "replay_endpoint": 5}', "replay_endpoint"),
        ('{"enable_kv_cache_events": "yes"}', "enable_kv_cache_events"),
        ('{"enable_kv_cache_events": true, "buffer_steps": 0}', "buffer_steps"),
        ('{"enable_kv_cache_events": true, "hwm": true}', "hwm"),
        ('{"enable_kv_cache_events": true, "topic": 3}', "topic"),
        ('{"enable_kv_cache_events": true, "batch_size": 3}', "batch_size"),
        ('{"publisher": "zmq"}', "enable_kv_cache_events"),
        ("[1]", "JSON object"),
        ("{", "not JSON"),
    ],
)
def test_bad_values_are_refused_by_name(text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        KVEventsConfig.from_json(text)


def test_events_need_the_prefix_cache_and_null_records_without_a_socket() -> None:
    from tgi.core.block_manager import BlockManager
    from tgi.core.config import EngineConfig
    from tgi.core.engine_startup import start_kv_events

    null = KVEventsConfig.from_json('{"enable_kv_cache_events": true, "publisher": "null"}')
    with pytest.raises(ConfigError, match="prefix caching is off"):
        start_kv_events(EngineConfig(prefix_caching=False, kv_events=null), BlockManager(4, 16), lora=None)
    assert start_kv_events(EngineConfig(kv_events=KVEventsConfig()), BlockManager(4, 16), lora=None) is None
    bm = BlockManager(4, 16, prefix_caching=True)
    stream = start_kv_events(EngineConfig(kv_events=null), bm, lora=None)
    assert stream.publisher is None and bm.observers == [stream.recorder]
    bm.reset_prefix_cache()
    stream.end_step()  # recorded, then dropped: "null" publishes nothing
    assert stream.recorder.drain() == []
