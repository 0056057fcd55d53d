"""One launcher flag as data: what `tgi launch` takes, where its value is read from, where it goes, and what it
means beside TGI's flag of the same name. The table (`tgi.server.flags.table`) is a tuple of these; the parser,
`--help`, the environment, the start-up checks and the compatibility table and flag reference of
docs/reference/flags.md are all made from it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

#: how the flag is given on the command line
#: - "value": `--x VALUE`
#: - "switch": `--x` alone means true (its variable takes true/false, 1/0, yes/no, on/off)
#: - "optional-switch": `--x`, `--x true` or `--x false`
#: - "list": `--x a,b --x c` gathers (a, b, c); its variable is one comma-separated list
#: - "repeat": `--x a --x b` gathers (a, b), each value whole; its variable is one value
#: - "version": `-V`/`--version` prints the version and exits
Kind = Literal["value", "switch", "optional-switch", "list", "repeat", "version"]


@dataclass(frozen=True)
class Engine:
    """The value goes to this `EngineConfig` field (`derive(args)` when the field is made of several flags, or
    is not the flag's value as it is). A value of None leaves the field's own default."""

    field: str
    derive: Callable | None = None


@dataclass(frozen=True)
class Server:
    """The value goes to this `ServerSettings` field (`derive(args)` as for `Engine`)."""

    field: str
    derive: Callable | None = None


@dataclass(frozen=True)
class Launcher:
    """The launcher itself acts on the value (where it listens, how it logs, what it prints, or a check)."""


LAUNCHER = Launcher()
Destination = Engine | Server | Launcher


@dataclass(frozen=True)
class Refusal:
    """A TGI flag this server does not serve: `why`, shown when it is given, and the value that asks for
    nothing (None: any value given is refused; a switch is refused when true)."""

    why: str
    neutral: object = None


@dataclass(frozen=True)
class Flag:
    """One flag of `tgi launch`.

    The first long name is the flag's name; the others are aliases (TGI's older names, a short option).
    `env` lists the variables read when the flag is not given, the first one set (non-empty) winning; `--help`
    names them. `parse` turns a string (from the command line or the environment) into the value, or raises
    `argparse.ArgumentTypeError`; `default` is the value when neither is given (a string goes through
    `parse`). `tgi` says what TGI's flag of this name does here (the compatibility table of
    docs/reference/flags.md; None: a flag of ours); a refused flag has `refusal` instead, and stops the start
    when given.
    """

    names: tuple[str, ...]
    help: str
    topic: str  # the --help section
    to: Destination
    env: tuple[str, ...] = ()
    parse: Callable[[str], object] | None = None
    default: object = None
    kind: Kind = "value"
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    env_help: str | None = None  # how --help names the variables, when more must be said than their names
    keep_empty_env: bool = False  # an empty variable is a value (refused by `check`), not "unset"
    tgi: str | None = None
    refusal: Refusal | None = None
    at_least: float | None = None  # smaller values are refused by name at start
    # a value refused at start: `check(value)` is the reason, or None when it is fine
    check: Callable[[object], str | None] | None = None
    # a value the tests give it, and the flags that value needs beside it (tests/unit/server/flags/test_flag_table.py)
    example: str | None = None
    example_needs: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return next(n for n in self.names if n.startswith("--"))

    @property
    def dest(self) -> str:
        """The attribute of the parsed namespace (a refused flag's own, so that no other reads it)."""
        base = self.name[2:].replace("-", "_")
        return "refused_" + base if self.refusal is not None else base
