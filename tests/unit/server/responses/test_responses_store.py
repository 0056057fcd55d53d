"""The Responses store keeps at most its number of entries and its bytes (the oldest go first) for at most its
age, and each entry for the tenant that stored it only."""

from __future__ import annotations

import json
import logging

import pytest

from tgi.server.responses.store import ResponsesStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_oldest_go_first_past_the_count():
    store = ResponsesStore(2, 60.0)
    for i in range(3):
        store.put(f"r{i}", {"id": f"r{i}"}, [{"role": "user", "content": str(i)}])
    assert store.get("r0") is None and len(store) == 2
    kept = store.get("r2")
    assert kept.body == {"id": "r2"} and kept.conversation == ({"role": "user", "content": "2"},)


def test_entries_expire_at_their_age():
    clock = Clock()
    store = ResponsesStore(10, 60.0, clock)
    store.put("a", {}, [])
    clock.now += 30
    store.put("b", {}, [])
    clock.now += 30
    assert store.get("a") is None and store.get("b") is not None
    clock.now += 30
    assert store.get("b") is None and len(store) == 0


def test_delete():
    store = ResponsesStore(4, 60.0)
    store.put("a", {}, [])
    assert store.delete("a") is True and store.delete("a") is False and store.get("a") is None


def test_a_store_of_no_entries_keeps_nothing():
    store = ResponsesStore(0, 60.0)
    assert not store.enabled
    with pytest.raises(RuntimeError):
        store.put("a", {}, [])


@pytest.mark.parametrize(("entries", "age", "size"), [(-1, 60.0, 10), (4, 0.0, 10), (4, 60.0, 0)])
def test_bad_bounds_are_refused(entries, age, size):
    with pytest.raises(ValueError):
        ResponsesStore(entries, age, max_bytes=size)


def _size(body: dict, conversation: list[dict]) -> int:
    return len(json.dumps([body, conversation], separators=(",", ":")).encode())


def test_the_oldest_go_first_past_the_bytes(caplog):
    image = {
        "role": "user",
        "content": [{"type": "input_image", "image_url": "data:image/png;base64," + "A" * 900}],
    }
    one = _size({"id": "r0"}, [image])
    store = ResponsesStore(100, 60.0, max_bytes=2 * one + 10)
    for i in range(3):
        assert store.put(f"r{i}", {"id": f"r{i}"}, [image]) is True
    assert store.get("r0") is None and store.get("r1") is not None and store.get("r2") is not None
    assert store.num_bytes == 2 * one and len(store) == 2
    store.delete("r1")
    assert store.num_bytes == one
    store.put("r2", {"id": "r2"}, [])  # stored again under its id: counted once, at its new size
    assert store.num_bytes == _size({"id": "r2"}, [])
    with caplog.at_level(logging.WARNING, logger="tgi.server"):
        too_big = {"role": "user", "content": "x" * (3 * one)}
        assert store.put("big", {"id": "big"}, [too_big]) is False
    assert store.get("big") is None and store.get("r2") is not None  # nothing else was evicted for it
    assert "response big not stored" in caplog.text and "--responses-store-max-bytes" in caplog.text


def test_entries_expire_out_of_the_byte_count():
    clock = Clock()
    store = ResponsesStore(10, 60.0, clock, max_bytes=1000)
    store.put("a", {"id": "a"}, [])
    clock.now += 61
    assert len(store) == 0 and store.num_bytes == 0


def test_another_tenant_finds_nothing():
    store = ResponsesStore(4, 60.0)
    store.put("a", {"id": "a"}, [], tenant="t1")
    assert store.get("a", "t1") is not None
    assert store.get("a", "t2") is None and store.get("a") is None  # nor a caller without a tenant
    assert store.delete("a", "t2") is False and store.get("a", "t1") is not None
    assert store.delete("a", "t1") is True and store.get("a", "t1") is None
    store.put("b", {"id": "b"}, [])  # a server without keys: no tenant, found without one
    assert store.get("b") is not None and store.get("b", "t1") is None
