"""The Neuron slot table (torch-free) under joins, finishes, cancellations and preemption."""

from __future__ import annotations

import random

import pytest

from tgi.backends.neuron.slots import SlotError, SlotTable


def test_joins_take_the_lowest_free_slot_and_finishes_give_it_back():
    t = SlotTable(3)
    assert [t.assign(r) for r in "abc"] == [0, 1, 2]
    with pytest.raises(SlotError, match="no free slot for d: all 3 are taken"):
        t.assign("d")
    assert t.release("b") == 1 and t.num_free == 1
    assert t.assign("d") == 1 and t.slot_of("d") == 1
    assert t.release("never-prefilled") is None  # cancelled while waiting: held no slot
    with pytest.raises(SlotError, match="a already holds slot 0"):
        t.assign("a")
    t.release("a")
    with pytest.raises(SlotError, match="a holds no slot"):
        t.slot_of("a")
    t.check_invariants()


def test_random_joins_finishes_and_cancellations_keep_the_invariants():
    rng = random.Random(0)
    t, live, n = SlotTable(4), set(), 0
    for _ in range(2000):
        if live and (t.num_free == 0 or rng.random() < 0.45):
            rid = rng.choice(sorted(live))
            live.discard(rid)
            assert t.release(rid) is not None
        else:
            rid = f"r{n}"
            n += 1
            slot = t.assign(rid)
            assert slot == min(set(range(4)) - set(t.occupied().values()) | {slot})
            live.add(rid)
        assert set(t.occupied()) == live
        t.check_invariants()
