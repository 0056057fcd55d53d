"""The multi-node flags: vLLM's names and LeaderWorkerSet's variables reach the engine's config; a group that
cannot form is refused by name before anything loads."""

from __future__ import annotations

import pytest
from launch_args import parse_launch_args as parse

from tgi.core.config import ConfigError
from tgi.server.cli.launch import engine_config

VARIABLES = (
    "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "LWS_LEADER_ADDRESS", "NNODES", "NODE_RANK", "HEADLESS", "MASTER_ADDR",
    "MASTER_PORT", "NUM_SHARD", "DIST_TIMEOUT",
)  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_a_leader_worker_set_worker_is_read_from_its_variables(monkeypatch):
    monkeypatch.setenv("LWS_GROUP_SIZE", "2")
    monkeypatch.setenv("LWS_WORKER_INDEX", "1")
    monkeypatch.setenv("LWS_LEADER_ADDRESS", "leader.svc")
    args = parse(["--num-shard", "4", "--headless"])
    config = engine_config(args)
    assert (config.nnodes, config.node_rank, config.master_addr, config.num_shard) == (2, 1, "leader.svc", 4)
    assert args.headless is True


def test_a_leader_worker_set_of_one_host_starts(monkeypatch):
    monkeypatch.setenv("LWS_GROUP_SIZE", "1")
    monkeypatch.setenv("LWS_WORKER_INDEX", "0")
    config = engine_config(parse(["--num-shard", "2"]))
    assert (config.nnodes, config.node_rank, config.master_addr) == (1, 0, "127.0.0.1")


def test_the_leader_of_two_nodes():
    config = engine_config(
        parse(["--num-shard", "2", "--nnodes", "2", "--master-addr", "127.0.0.1", "--dist-timeout", "30"])
    )
    assert (config.nnodes, config.node_rank, config.master_port, config.dist_timeout_s) == (2, 0, None, 30.0)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--num-shard", "2", "--nnodes", "2"], "--nnodes 2 needs --master-addr .*LWS_LEADER_ADDRESS"),
        (["--num-shard", "3", "--nnodes", "2", "--master-addr", "h"], "--num-shard 3 .*split evenly.*--nnodes 2"),
        (["--num-shard", "2", "--nnodes", "2", "--master-addr", "h", "--node-rank", "2", "--headless"],
         r"--node-rank must be in \[0, --nnodes 2\)"),
        (["--num-shard", "2", "--nnodes", "2", "--master-addr", "h", "--node-rank", "1"], "--node-rank 1 needs --headless"),
        (["--num-shard", "2", "--nnodes", "2", "--master-addr", "h", "--headless"], "--headless with --node-rank 0"),
        (["--headless"], "--headless needs --nnodes > 1"),
        (["--nnodes", "0"], "--nnodes must be >= 1"),
        (["--dist-timeout", "0"], "--dist-timeout must be a number of seconds > 0"),
    ],
)  # fmt: skip
def test_a_group_that_cannot_form_is_refused_by_name(argv, match):
    with pytest.raises(ConfigError, match=match):
        engine_config(parse(argv))
