"""The fixed slots of a Neuron model compiled for a static batch (no torch here).

A model compiled with batch size B keeps the keys/values of B sequences, one per slot, inside the compiled
graph. As in TGI's Neuron server, a new request takes a free slot at its prefill (which fills only that
slot's cache) and keeps it until it finishes, is cancelled or is preempted; decodes then run every
occupied slot at once, each identified by its slot id (`seq_ids`).
"""

from __future__ import annotations


class SlotError(RuntimeError):
    """A slot operation the scheduler's constraints should have made impossible (all slots taken, a
    request prefilled twice, a decode for a request without a slot)."""


class SlotTable:
    """Which request holds which of `num_slots` slots. The lowest free slot is taken first."""

    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise ValueError(f"a compiled model has at least one slot, got {num_slots}")
        self.num_slots = num_slots
        self._by_request: dict[str, int] = {}
        self._free = list(range(num_slots))  # kept sorted

    @property
    def num_free(self) -> int:
        return len(self._free)

    def occupied(self) -> dict[str, int]:
        """request id -> slot, for every occupied slot."""
        return dict(self._by_request)

    def assign(self, request_id: str) -> int:
        """A free slot for a request that has none (its prefill)."""
        if request_id in self._by_request:
            raise SlotError(f"{request_id} already holds slot {self._by_request[request_id]}")
        if not self._free:
            raise SlotError(f"no free slot for {request_id}: all {self.num_slots} are taken")
        slot = self._free.pop(0)
        self._by_request[request_id] = slot
        return slot

    def get(self, request_id: str) -> int | None:
        """The slot `request_id` holds, None when it holds none."""
        return self._by_request.get(request_id)

    def slot_of(self, request_id: str) -> int:
        try:
            return self._by_request[request_id]
        except KeyError:
            raise SlotError(f"{request_id} holds no slot (it was never prefilled, or was released)") from None

    def release(self, request_id: str) -> int | None:
        """Free the slot of a finished, cancelled or preempted request; None when it held none (a request
        cancelled while it waited never had one)."""
        slot = self._by_request.pop(request_id, None)
        if slot is not None:
            self._free.append(slot)
            self._free.sort()
        return slot

    def check_invariants(self) -> None:
        held = sorted(self._by_request.values())
        assert len(set(held)) == len(held), "a slot is held twice"
        assert sorted(held + self._free) == list(range(self.num_slots)), "slots lost or duplicated"
