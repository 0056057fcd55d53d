"""The nodes' join and watch on node 0's store, with a dict standing in for c10d's store: what is compared at
join and how a refusal reads, the model's fingerprint, and a node named when its heartbeats stop or its rank
reports a death."""

from __future__ import annotations

import json

import pytest

from tgi.core.parallel import node_join as nj


class DictStore:
    """The c10d `Store` methods node_join uses."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        self.values[key] = value

    def get(self, key: str) -> bytes:
        return self.values[key]

    def check(self, keys: list[str]) -> bool:
        return all(k in self.values for k in keys)

    def add(self, key: str, n: int) -> int:
        value = int(self.values.get(key, b"0")) + n
        self.values[key] = str(value).encode()
        return value


def model(folder, layers: int = 2, weights: bytes = b"w" * 10):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": layers}))
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "README.md").write_text("not part of it")
    return str(folder)


def test_the_fingerprint_is_the_config_and_the_weights_names_and_sizes_wherever_they_lie(tmp_path):
    a = nj.model_fingerprint(model(tmp_path / "a"))
    assert a == nj.model_fingerprint(model(tmp_path / "elsewhere"))  # another path, the same checkpoint
    assert a.endswith("(1 weight file(s), 10 bytes)")
    assert a != nj.model_fingerprint(model(tmp_path / "deeper", layers=3))
    assert a != nj.model_fingerprint(model(tmp_path / "bigger", weights=b"w" * 11))
    single = tmp_path / "m.gguf"
    single.write_bytes(b"g" * 5)
    assert nj.model_fingerprint(str(single)).endswith("(1 weight file(s), 5 bytes)")


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("version", "0.0.1", "its package version is 0.0.1, node 0's is 1.0"),
        ("world_size", 4, "its --num-shard is 4, node 0's is 2"),
        ("nnodes", 3, "its --nnodes is 3, node 0's is 2"),
        ("backend", "cuda", "its backend is cuda, node 0's is cpu"),
        ("model", "other", "its model is other, node 0's is m"),
    ],
)
def test_a_node_that_differs_is_refused_with_the_first_difference(field, value, reason):
    leader = {
        "version": "1.0",
        "world_size": 2,
        "nnodes": 2,
        "backend": "cpu",
        "model": "m",
        "host": "a",
        "pid": 1,
    }
    assert (
        nj.join_problem(leader, {**leader, "host": "b", "pid": 2}) is None
    )  # where it runs is no difference
    assert nj.join_problem(leader, {**leader, field: value}) == reason


def test_a_node_record_says_who_it_is(tmp_path):
    record = nj.node_record(model(tmp_path / "m"), "cpu", 2, 2)
    assert nj.decode(nj.encode(record)) == record
    assert set(record) == {"version", "world_size", "nnodes", "backend", "model", "host", "pid"}


def test_a_node_whose_heartbeats_stop_is_named(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(nj.time, "monotonic", lambda: clock[0])
    store = DictStore()
    beats = nj.Heartbeats(store, {1: {"host": "h1", "pid": 7}})
    store.add(nj.heartbeat_key(1), 1)
    assert beats.stale() is None
    clock[0] += nj.HEARTBEAT_TIMEOUT_S - 0.5
    store.add(nj.heartbeat_key(1), 1)  # still beating
    assert beats.stale() is None
    clock[0] += nj.HEARTBEAT_TIMEOUT_S + 0.5
    assert beats.stale() == (
        f"node 1 (h1, pid 7) stopped answering: no heartbeat for {nj.HEARTBEAT_TIMEOUT_S + 0.5:.1f} s "
        "(its process or its host is gone)"
    )


def test_a_rank_death_a_node_reports_is_named_in_its_words():
    store = DictStore()
    beats = nj.Heartbeats(store, {1: {"host": "h1", "pid": 7}})
    store.set(nj.failure_key(1), b"shard rank 1 (pid 9 on node 1) died: killed by signal SIGKILL")
    assert (
        beats.stale() == "node 1 (h1, pid 7): shard rank 1 (pid 9 on node 1) died: killed by signal SIGKILL"
    )


def test_a_failure_report_is_read_under_the_groups_seal_and_a_forged_one_named_as_such():
    seals = nj.GroupSeal(b"s" * 32, "session")
    store = DictStore()
    beats = nj.Heartbeats(store, {1: {"host": "h1", "pid": 7}}, seals)
    store.set(nj.failure_key(1), seals.seal(nj.failure_key(1), "shard rank 1 died"))
    assert beats.stale() == "node 1 (h1, pid 7): shard rank 1 died"
    store.set(nj.failure_key(1), nj.GroupSeal(b"o" * 32, "session").seal(nj.failure_key(1), "lies"))
    assert beats.stale().startswith("node 1 (h1, pid 7): its failure report failed its HMAC check")
    store.set(nj.failure_key(1), b"plain text")  # written by no node of this group
    assert "its failure report is not a sealed value" in beats.stale()
