"""Pipeline parallelism over two nodes: `--pipeline-parallel-size 2 --num-shard 1 --nnodes 2`, each node a
separate `tgi launch` process on this machine over loopback holding one stage (one rank): the same greedy
tokens as one process; node 0's stop ends the headless node with code 0."""

from __future__ import annotations

import httpx
import pytest
from test_multi_node import PROMPT, free_port, greedy_ids, model, start, wait_healthy

pytestmark = pytest.mark.e2e  # real server processes

__all__ = ["model", "start"]  # the fixtures, from the tensor-parallel nodes' tests

STAGES = ("--num-shard", "1", "--pipeline-parallel-size", "2")


def test_two_nodes_one_stage_each_give_one_process_tokens(model, start):
    master = free_port()
    worker = start(1, model, master, *STAGES)
    leader = start(0, model, master, *STAGES)
    reference = greedy_ids(model, 8)  # while the nodes start
    wait_healthy(leader)
    out = httpx.post(
        leader.url + "/generate",
        json={"inputs": PROMPT, "parameters": {"max_new_tokens": 8, "details": True}},
        timeout=60,
    ).json()
    assert [t["id"] for t in out["details"]["tokens"]] == reference
    assert leader.stop() == 0, leader.logs()
    assert worker.proc.wait(20) == 0, worker.logs()
