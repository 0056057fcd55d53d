"""TGI environment variables that are no launcher flag and that this server does not act on: each one set
is named in a warning at start-up, never silently ignored. (Every TGI launcher flag's variable is read by
its flag, served or refused by name: `tgi.server.launch_flags`.)"""

from __future__ import annotations

import os

UNSERVED = (
    # TGI's python server reads it (chunked prefill on or off); here the backend's runner decides
    "PREFILL_CHUNKING",
)


def unserved_variables(environ: dict[str, str] | None = None) -> list[str]:
    """The TGI launcher variables set (non-empty) in `environ` that this server does not act on."""
    env = os.environ if environ is None else environ
    return [name for name in UNSERVED if env.get(name, "") != ""]


def warning(names: list[str]) -> str:
    return (
        f"ignoring TGI environment variable(s) this server does not implement: {', '.join(names)} "
        "(see `tgi launch --help` for what it takes)"
    )
