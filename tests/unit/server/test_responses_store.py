"""The Responses store keeps at most its number of entries (the oldest go first) for at most its age."""

from __future__ import annotations

import pytest

from tgi.server.responses_store import ResponsesStore


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


@pytest.mark.parametrize(("entries", "age"), [(-1, 60.0), (4, 0.0)])
def test_bad_bounds_are_refused(entries, age):
    with pytest.raises(ValueError):
        ResponsesStore(entries, age)
