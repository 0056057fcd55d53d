"""Rank arithmetic of a group over several hosts: --num-shard ranks in all, split evenly over --nnodes."""

from __future__ import annotations

import pytest

from tgi.core.parallel.topology import NodeLayout, apply_dist_timeout, dist_timeout_s, layout_problem


def test_one_host_holds_every_rank():
    layout = NodeLayout(4)
    assert (layout.per_node, list(layout.ranks)) == (4, [0, 1, 2, 3])
    assert [layout.local_rank(r) for r in range(4)] == [0, 1, 2, 3]


@pytest.mark.parametrize(("node_rank", "ranks"), [(0, [0, 1]), (1, [2, 3]), (2, [4, 5])])
def test_global_rank_is_node_rank_times_per_node_plus_local_rank(node_rank, ranks):
    layout = NodeLayout(6, nnodes=3, node_rank=node_rank)
    assert layout.per_node == 2
    assert list(layout.ranks) == ranks
    assert [layout.global_rank(local) for local in range(2)] == ranks
    assert [layout.local_rank(r) for r in ranks] == [0, 1]  # the device on its own host
    assert {layout.node_of(r) for r in ranks} == {node_rank}


def test_one_rank_per_node():
    layout = NodeLayout(2, nnodes=2, node_rank=1)
    assert (list(layout.ranks), layout.global_rank(0), layout.local_rank(1), layout.node_of(0)) == (
        [1],
        1,
        0,
        0,
    )
    with pytest.raises(ValueError, match="local rank 1 out of"):
        layout.global_rank(1)


@pytest.mark.parametrize(
    ("world_size", "nnodes", "node_rank", "problem"),
    [
        (3, 2, 0, "--num-shard 3 .* does not split evenly over --nnodes 2"),
        (2, 2, 2, r"--node-rank must be in \[0, --nnodes 2\), got 2"),
        (2, 2, -1, r"--node-rank must be in"),
        (2, 0, 0, "--nnodes must be >= 1"),
        (0, 1, 0, "--num-shard must be >= 1"),
    ],
)
def test_a_layout_that_is_no_group_is_refused_naming_the_flag(world_size, nnodes, node_rank, problem):
    with pytest.raises(ValueError, match=problem):
        NodeLayout(world_size, nnodes, node_rank)
    assert layout_problem(1, 1, 0) is None


def test_dist_timeout_reaches_the_collective_through_the_environment(monkeypatch):
    monkeypatch.delenv("TGI_COLLECTIVE_TIMEOUT", raising=False)
    assert dist_timeout_s() == 600.0
    apply_dist_timeout(None)
    assert dist_timeout_s() == 600.0
    apply_dist_timeout(12.5)
    assert dist_timeout_s() == 12.5
