"""The multi-node flags of the model table: declared with vLLM's names and LeaderWorkerSet's variables, and
refused by name when they ask for more than one host (one host is all tensor parallelism runs on)."""

from __future__ import annotations

import argparse

import pytest

from tgi.core.config import ConfigError
from tgi.server.launcher import add_launch_arguments, engine_config

LWS = ("LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "NNODES", "NODE_RANK", "HEADLESS")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in LWS:
        monkeypatch.delenv(name, raising=False)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("variable", "value", "flag"),
    [("LWS_GROUP_SIZE", "2", "--nnodes 2"), ("LWS_WORKER_INDEX", "1", "--node-rank 1")],
)
def test_a_leader_worker_set_of_several_hosts_is_refused_naming_the_flag(monkeypatch, variable, value, flag):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=f"{flag} .*runs on one host"):
        engine_config(parse([]))


def test_a_leader_worker_set_of_one_host_starts(monkeypatch):
    monkeypatch.setenv("LWS_GROUP_SIZE", "1")
    monkeypatch.setenv("LWS_WORKER_INDEX", "0")
    engine_config(parse(["--num-shard", "2"]))


@pytest.mark.parametrize("argv", [["--nnodes", "2"], ["--node-rank", "1"], ["--headless"]])
def test_multi_node_flags_are_refused_by_name(argv):
    with pytest.raises(ConfigError, match=f"{argv[0]}\\b.*not built yet"):
        engine_config(parse(argv))
