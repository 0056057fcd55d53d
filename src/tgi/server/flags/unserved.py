"""TGI's environment variables that are no launcher flag (`UNSERVED_VARIABLES` in the table): the ones set are
named in a warning at start."""

from __future__ import annotations

import os

from tgi.server.flags.table import UNSERVED_VARIABLES

UNSERVED = tuple(name for name, _ in UNSERVED_VARIABLES)


def unserved_variables(environ: dict[str, str] | None = None) -> list[str]:
    """The TGI launcher variables set (non-empty) in `environ` that this server does not act on."""
    env = os.environ if environ is None else environ
    return [name for name in UNSERVED if env.get(name, "") != ""]


def warning(names: list[str]) -> str:
    return (
        f"ignoring TGI environment variable(s) this server does not implement: {', '.join(names)} "
        "(see `tgi launch --help` for what it takes)"
    )
