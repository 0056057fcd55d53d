"""`tgi launch`'s flags parsed as the launcher parses them, for the tests of the flag table and its checks."""

from __future__ import annotations

import argparse

from tgi.server.cli.launch import add_launch_arguments


def parse_launch_args(argv: list[str]) -> argparse.Namespace:
    """`argv` parsed by a parser with every launcher flag (their variables read as defaults, as at start)."""
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    return parser.parse_args(argv)
