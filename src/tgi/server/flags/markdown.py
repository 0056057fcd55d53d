"""The documentation's two blocks made from the flag table, each between its markers in
docs/reference/flags.md: the compatibility table of TGI's launcher flags (`COMPATIBILITY`) and the reference
of every flag, with its help, variables and default (`REFERENCE`). `python -m tgi.server.flags --markdown`
(or `--reference`) prints one, `--update docs/reference/flags.md` writes every block whose markers the file
holds, and tests/unit/server/flags/test_flag_table.py fails when the page differs from them."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tgi.server.flags.spec import Flag
from tgi.server.flags.table import FLAGS, UNSERVED_VARIABLES

#: the page that holds both blocks, relative to the repository root
PAGE = "docs/reference/flags.md"
UPDATE = f"`python -m tgi.server.flags --update {PAGE}`"

BEGIN = f"<!-- launcher flags: made by {UPDATE} from src/tgi/server/flags/ -->"
END = "<!-- end of launcher flags -->"
REFERENCE_BEGIN = f"<!-- flag reference: made by {UPDATE} from src/tgi/server/flags/ -->"
REFERENCE_END = "<!-- end of flag reference -->"


def _names(flag: Flag) -> str:
    return "/".join(f"`{name}`" for name in flag.names)


def _cell(text: str) -> str:
    """`text` in a table cell: a `|` would end the cell."""
    return text.replace("|", "\\|")


def _here(flag: Flag) -> str | None:
    """What TGI's flag does here; None for a flag of ours."""
    if flag.refusal is None:
        return flag.tgi
    neutral = flag.refusal.neutral
    if neutral is None:
        return f"refused: {flag.refusal.why}"
    shown = f"{neutral:g}" if isinstance(neutral, (int, float)) else str(neutral)
    return f"refused except `{shown}`: {flag.refusal.why}"


def compatibility_markdown(flags: tuple[Flag, ...] = FLAGS) -> str:
    """The block between `BEGIN` and `END` (both included): TGI's flags, one row per meaning (flags that
    mean the same share a row), then ours, then TGI's variables that are no flag."""
    rows: dict[str, list[str]] = {}
    for flag in flags:
        here = _here(flag)
        if here is not None:
            rows.setdefault(_cell(here), []).append(_names(flag))
    ours = [
        f"{_names(f)} (`{'`, `'.join(f.env)}`)" if f.env else _names(f) for f in flags if _here(f) is None
    ]
    lines = [BEGIN, "", "| flag | here |", "|---|---|"]
    lines += [f"| {', '.join(names)} | {here} |" for here, names in rows.items()]
    lines += [
        "",
        f"Ours beyond TGI's (with their variables; [the reference below](#every-flag) says what each does): "
        f"{', '.join(ours)}.",
    ]
    unserved = ", ".join(f"`{name}` ({why})" for name, why in UNSERVED_VARIABLES)
    lines += ["", f"TGI's variables that are no flag and that this server does not act on, each named in a warning "
              f"at start: {unserved}.", "", END]  # fmt: skip
    return "\n".join(lines)


def _variables(flag: Flag) -> str:
    if flag.env_help:  # the variables named as --help names them, each in code
        return re.sub(r"\b[A-Z][A-Z0-9_]{2,}\b", lambda m: f"`{m.group(0)}`", flag.env_help)
    return ", ".join(f"`{name}`" for name in flag.env)


def _default(flag: Flag) -> str:
    if flag.kind == "version" or flag.default is None or flag.default == ():
        return ""
    value = flag.default
    if isinstance(value, bool):
        value = str(value).lower()
    elif isinstance(value, tuple):
        value = ",".join(str(v) for v in value)
    return f"`{value}`"


def _what(flag: Flag) -> str:
    text = flag.help
    if flag.choices is not None:
        text += f" (one of {', '.join(f'`{c}`' for c in flag.choices)})"
    if flag.kind == "switch":
        text += " (a switch: given alone, true)"
    if flag.tgi is not None or flag.refusal is not None:
        text += " (TGI's flag: [compatibility](#compatibility-with-tgi))"
    return _cell(text)


def reference_markdown(flags: tuple[Flag, ...] = FLAGS) -> str:
    """The block between `REFERENCE_BEGIN` and `REFERENCE_END` (both included): every flag, by its --help
    section, with its variables, its default (empty: none, or the engine's own) and its help."""
    topics: dict[str, list[Flag]] = {}
    for flag in flags:
        topics.setdefault(flag.topic, []).append(flag)
    lines = [REFERENCE_BEGIN]
    for topic, members in topics.items():
        lines += [
            "",
            f"### {topic[0].upper()}{topic[1:]}",
            "",
            "| flag | variables | default | what it does |",
        ]
        lines += ["|---|---|---|---|"]
        lines += [f"| {_names(f)} | {_variables(f)} | {_default(f)} | {_what(f)} |" for f in members]
    lines += ["", REFERENCE_END]
    return "\n".join(lines)


@dataclass(frozen=True)
class Block:
    begin: str
    end: str
    make: Callable[[], str]


BLOCKS = (
    Block(BEGIN, END, compatibility_markdown),
    Block(REFERENCE_BEGIN, REFERENCE_END, reference_markdown),
)


def _span(text: str, begin: str, end: str) -> tuple[int, int] | None:
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        return None
    return start, stop + len(end)


def page_block(text: str, begin: str = BEGIN, end: str = END) -> str:
    """The block of `text` between the markers (both included); `ValueError` without them."""
    span = _span(text, begin, end)
    if span is None:
        raise ValueError(f"no block between {begin!r} and {end!r}")
    return text[span[0] : span[1]]


def replace_block(text: str, block: str, begin: str = BEGIN, end: str = END) -> str:
    """`text` with its block between the markers replaced by `block`; `ValueError` without the markers."""
    span = _span(text, begin, end)
    if span is None:
        raise ValueError(f"no block between {begin!r} and {end!r}")
    return text[: span[0]] + block + text[span[1] :]


def update_page(text: str) -> str:
    """`text` with every block whose markers it holds made again; `ValueError` when it holds none."""
    found = [block for block in BLOCKS if _span(text, block.begin, block.end) is not None]
    if not found:
        raise ValueError(f"no block of the flag table's between markers (they are in {PAGE})")
    for block in found:
        text = replace_block(text, block.make(), block.begin, block.end)
    return text
