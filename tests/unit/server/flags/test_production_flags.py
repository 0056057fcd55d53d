"""`--stream-write-timeout` (STREAM_WRITE_TIMEOUT) and `--swap-drain-timeout` (SWAP_DRAIN_TIMEOUT): shown in
--help with their variables, read from them, checked by name, and carried to the server's settings."""

from __future__ import annotations

import argparse
import re

import pytest
from launch_args import parse_launch_args as parse

from tgi.core.config import ConfigError
from tgi.server.cli.launch import add_launch_arguments, server_settings
from tgi.server.flags.operator_flags import DEFAULT_SWAP_DRAIN_TIMEOUT_S
from tgi.server.flags.serving_flags import DEFAULT_STREAM_WRITE_TIMEOUT_S


def test_help_names_the_flag_and_its_variable():
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert re.search(r"--stream-write-timeout .*?\[env: STREAM_WRITE_TIMEOUT\]", text)


def test_default_flag_and_variable_reach_the_settings(monkeypatch):
    monkeypatch.delenv("STREAM_WRITE_TIMEOUT", raising=False)
    assert server_settings(parse([])).stream_write_timeout_s == DEFAULT_STREAM_WRITE_TIMEOUT_S
    assert server_settings(parse(["--stream-write-timeout", "7.5"])).stream_write_timeout_s == 7.5
    monkeypatch.setenv("STREAM_WRITE_TIMEOUT", "4")
    assert server_settings(parse([])).stream_write_timeout_s == 4.0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_timeout_that_is_no_deadline_is_refused_by_name(monkeypatch, value):
    monkeypatch.delenv("STREAM_WRITE_TIMEOUT", raising=False)
    with pytest.raises(ConfigError, match="--stream-write-timeout must be a number of seconds > 0"):
        server_settings(parse(["--stream-write-timeout", value]))


def test_swap_drain_timeout_flag_and_variable_reach_the_settings(monkeypatch):
    monkeypatch.delenv("SWAP_DRAIN_TIMEOUT", raising=False)
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    assert re.search(
        r"--swap-drain-timeout .*?\[env: SWAP_DRAIN_TIMEOUT\]", " ".join(parser.format_help().split())
    )
    assert server_settings(parse([])).swap_drain_timeout_s == DEFAULT_SWAP_DRAIN_TIMEOUT_S == 60
    assert server_settings(parse(["--swap-drain-timeout", "0"])).swap_drain_timeout_s == 0  # at once
    monkeypatch.setenv("SWAP_DRAIN_TIMEOUT", "2.5")
    assert server_settings(parse([])).swap_drain_timeout_s == 2.5


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_swap_drain_timeout_that_is_no_deadline_is_refused_by_name(monkeypatch, value):
    monkeypatch.delenv("SWAP_DRAIN_TIMEOUT", raising=False)
    with pytest.raises(ConfigError, match="--swap-drain-timeout must be a number of seconds >= 0"):
        server_settings(parse(["--swap-drain-timeout", value]))
