"""The argparse side of the table: `add_flags(parser)` adds every flag of `FLAGS`, in --help sections by
topic, each help text ending with the variables it is read from (`[env: X]`), each default read from them.

A value read from the environment goes through the flag's parser when the command line does not give the flag
(argparse converts a string default), so that a bad value is refused naming the flag, as on the command line.
"""

from __future__ import annotations

import argparse
import os

from tgi.server.flags.parsers import env, on_off
from tgi.server.flags.spec import Flag
from tgi.server.flags.table import FLAGS


class _Switch(argparse.Action):
    """`--x` alone: true. Its default (from the variable) is read with `on_off`."""

    def __init__(self, option_strings, dest, default=False, type=on_off, help=None, **_):
        super().__init__(option_strings, dest, nargs=0, default=default, type=type, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, True)


class _Gather(argparse.Action):
    """`--x a,b --x c`: (a, b, c); given on the command line, the variable's list is not added."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        if current is None or current is self.default:
            current = ()
        setattr(namespace, self.dest, (*current, *values))


class _Repeat(argparse.Action):
    """`--x a --x b`: (a, b), each value whole; given on the command line, the variable's value is not
    added."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        if current is None or current is self.default:
            current = ()
        setattr(namespace, self.dest, (*current, values))


def _one_of(parse, choices: tuple[str, ...]):
    """`parse`, then the value must be one of `choices` (argparse checks choices on the command line only,
    not on a value read from the environment)."""

    def parse_choice(value: str):
        parsed = value if parse is None else parse(value)
        if parsed not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {value!r}")
        return parsed

    parse_choice.__name__ = getattr(parse, "__name__", "choice")
    return parse_choice


def env_value(flag: Flag) -> str | None:
    """The flag's value as its variables give it: the first one set (non-empty, unless an empty value is a
    value of this flag), else None."""
    if flag.keep_empty_env:
        return next((os.environ[name] for name in flag.env if name in os.environ), None)
    return env(*flag.env)


def help_text(flag: Flag) -> str:
    if not flag.env:
        return flag.help
    return f"{flag.help} [env: {flag.env_help or ', '.join(flag.env)}]"


def add_flags(parser: argparse.ArgumentParser, flags: tuple[Flag, ...] = FLAGS) -> None:
    """Add `flags` to `parser`. A flag the parser defines already is left to that definition (a command that
    composes its own parser wins)."""
    taken = set(parser._option_string_actions)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for flag in flags:
        if taken.intersection(flag.names):
            continue
        if flag.topic not in groups:
            groups[flag.topic] = parser.add_argument_group(flag.topic)
        groups[flag.topic].add_argument(*flag.names, **_argparse_options(flag))


def _argparse_options(flag: Flag) -> dict:
    if flag.kind == "version":
        from tgi.server import __version__

        return {"action": "version", "version": f"tgi {__version__}", "help": flag.help}
    raw = env_value(flag)
    options = {"dest": flag.dest, "help": help_text(flag), "default": flag.default if raw is None else raw}
    if flag.kind == "switch":
        return {**options, "action": _Switch}
    if flag.kind == "optional-switch":
        return {**options, "type": on_off, "nargs": "?", "const": True, "metavar": "{true,false}"}
    parse = flag.parse if flag.choices is None else _one_of(flag.parse, flag.choices)
    options.update(type=parse, choices=flag.choices, metavar=flag.metavar)
    if flag.kind == "list":
        options["action"] = _Gather
    if flag.kind == "repeat":  # a tuple whether given once, several times or by its variable
        options["action"] = _Repeat
        if raw is not None:
            options["default"] = (raw if parse is None else parse(raw),)
    return options
