"""Pipeline parallelism over two nodes, each a separate `tgi launch` process on this machine over loopback:
`--pipeline-parallel-size 2 --num-shard 1 --nnodes 2`, one stage (one rank) on each node; and 2 stages × 2
tensor-parallel shards (`--num-shard 2`), two ranks on each node. The same greedy tokens as one process;
node 0's stop ends the headless node with code 0."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from test_multi_node import PROMPT, free_port, greedy_ids, model, one_process, served, start, wait_healthy

pytestmark = pytest.mark.e2e  # real server processes

__all__ = ["model", "start"]  # the fixtures, from the tensor-parallel nodes' tests

STAGES = ("--num-shard", "1", "--pipeline-parallel-size", "2")
ATOL = 1e-4  # max |logprob difference| against one process, float32 (as the in-process pipeline tests)


def test_two_nodes_one_stage_each_give_one_process_tokens(model, start):
    master = free_port()
    worker = start(1, model, master, *STAGES)
    leader = start(0, model, master, *STAGES)
    reference = greedy_ids(model, 8)  # while the nodes start
    wait_healthy(leader)
    assert served(leader, PROMPT, 8)[0] == reference
    assert leader.stop() == 0, leader.logs()
    assert worker.proc.wait(20) == 0, worker.logs()


def test_two_nodes_of_two_shards_one_stage_each_give_one_process_tokens(model, start):
    """TP=2 × PP=2 over two nodes: 4 ranks, 2 on each node. Global rank r is shard r % 2 of stage r // 2
    (stage_split), and node k holds ranks 2k, 2k + 1 (topology): node 0 holds stage 0 (ranks 0, 1: the
    embedding and layer 0 of the model's 2), node 1 stage 1 (ranks 2, 3: layer 1, the final norm and the
    head; it samples). Each stage's all-reduces stay on its node; the activations and the step's output
    cross between the nodes. Two requests of different lengths at once, as one batch."""
    shards = ("--num-shard", "2", "--pipeline-parallel-size", "2")
    prompts = [PROMPT, "the quick brown fox jumps over the lazy dog, then " + " ".join([PROMPT] * 3)]
    master = free_port()
    worker = start(1, model, master, *shards)
    leader = start(0, model, master, *shards)
    reference = one_process(model, prompts, 8)  # while the nodes start
    wait_healthy(leader)
    assert "ranks [2, 3]" in worker.text(), worker.logs()
    with ThreadPoolExecutor(len(prompts)) as pool:
        outputs = list(pool.map(lambda p: served(leader, p, 8), prompts))
    for (tokens, logprobs), (ref_tokens, ref_logprobs) in zip(outputs, reference, strict=True):
        assert tokens == ref_tokens
        diff = max(abs(a - b) for a, b in zip(logprobs, ref_logprobs, strict=True))
        assert diff < ATOL, (logprobs, ref_logprobs)
    assert leader.stop() == 0, leader.logs()
    assert worker.proc.wait(20) == 0, worker.logs()
