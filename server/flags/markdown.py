"""The README's compatibility table of TGI's launcher flags, made from the flag table: `python -m
tgi.server.flags --markdown` prints it, `--update README.md` writes it between the README's markers, and
tests/unit/server/flags/test_flag_table.py fails when the README differs from it."""

from __future__ import annotations

from tgi.server.flags.spec import Flag
from tgi.server.flags.table import FLAGS, UNSERVED_VARIABLES

BEGIN = "<!-- launcher flags: made by `python -m tgi.server.flags --update README.md` from server/flags/ -->"
END = "<!-- end of launcher flags -->"


def _names(flag: Flag) -> str:
    return "/".join(f"`{name}`" for name in flag.names)


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
            rows.setdefault(here.replace("|", "\\|"), []).append(_names(flag))
    ours = [
        f"{_names(f)} (`{'`, `'.join(f.env)}`)" if f.env else _names(f) for f in flags if _here(f) is None
    ]
    lines = [BEGIN, "", "| flag | here |", "|---|---|"]
    lines += [f"| {', '.join(names)} | {here} |" for here, names in rows.items()]
    lines += [
        "",
        f"Ours beyond TGI's (with their variables; `tgi launch --help` says what each does): {', '.join(ours)}.",
    ]
    unserved = ", ".join(f"`{name}` ({why})" for name, why in UNSERVED_VARIABLES)
    lines += ["", f"TGI's variables that are no flag and that this server does not act on, each named in a warning "
              f"at start: {unserved}.", "", END]  # fmt: skip
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """`text` with its block between the markers replaced by `block`; `ValueError` without the markers."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no block between {BEGIN!r} and {END!r}")
    return text[:start] + block + text[end + len(END) :]


def readme_block(text: str) -> str:
    """The block of `text` between the markers (both included)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no block between {BEGIN!r} and {END!r}")
    return text[start : end + len(END)]
