"""Where the flags' values go: `engine_fields(args)` are the `EngineConfig` fields, `server_fields(args)` the
`ServerSettings` fields, each made from the table's `Engine` / `Server` destinations after the flags' checks
passed (`ConfigError` otherwise). A value of None leaves the field's own default."""

from __future__ import annotations

import argparse

from tgi.server.flags.checks import check_flags
from tgi.server.flags.spec import Engine, Server
from tgi.server.flags.table import FLAGS


def engine_fields(args: argparse.Namespace) -> dict:
    return _checked_fields(args, Engine)


def server_fields(args: argparse.Namespace) -> dict:
    return _checked_fields(args, Server)


def _checked_fields(args: argparse.Namespace, destination: type[Engine] | type[Server]) -> dict:
    check_flags(args)
    fields = {}
    for flag in FLAGS:
        to = flag.to
        if not isinstance(to, destination) or to.field in fields:
            continue
        value = to.derive(args) if to.derive is not None else getattr(args, flag.dest)
        if value is not None:
            fields[to.field] = value
    return fields
