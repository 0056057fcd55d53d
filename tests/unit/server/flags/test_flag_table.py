"""The launcher's flag table (`tgi.server.flags`), entry by entry: every flag is in `tgi launch --help` with
its variables, is read from each of them, reaches its destination (an `EngineConfig` field, a `ServerSettings`
field, or the launcher), and a refused one stops the start naming it; the documentation's compatibility table and
flag reference (docs/reference/flags.md) are the ones the table makes. A flag added to the table is checked here without a line of this file changing."""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from launch_args import parse_launch_args as parse

from tgi.core.config import ConfigError, EngineConfig
from tgi.server.cli.launch import engine_config, server_settings
from tgi.server.cli.main import build_parser
from tgi.server.flags import FLAGS
from tgi.server.flags.markdown import (
    END,
    REFERENCE_BEGIN,
    REFERENCE_END,
    compatibility_markdown,
    page_block,
    reference_markdown,
)
from tgi.server.flags.parsers import comma_list
from tgi.server.flags.spec import Engine, Server
from tgi.server.service.settings import ServerSettings

PAGE = Path(__file__).resolve().parents[4] / "docs" / "reference" / "flags.md"
ALL_VARIABLES = sorted({v for f in FLAGS for v in f.env})
SERVED = [f for f in FLAGS if f.refusal is None]
WITH_EXAMPLE = [f for f in FLAGS if f.example is not None]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ALL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch, tmp_path):
    """Examples name relative paths (a LoRA root ".", a tokenizer_config.json, an --api-key-file): they
    resolve in here."""
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{{ messages[0][\'content\'] }}"}')
    (tmp_path / "api-keys.txt").write_text("key-of-a team-a\n")
    monkeypatch.chdir(tmp_path)


def given(flag) -> list[str]:
    """The flag given its example on the command line (a switch alone)."""
    return [flag.name] if flag.kind == "switch" else [flag.name, flag.example]


def test_the_table_declares_each_flag_once_with_a_variable():
    names = [n for f in FLAGS for n in f.names]
    assert len(names) == len(set(names))
    without = [f.name for f in FLAGS if not f.env and f.kind != "version" and f.name != "--env"]
    assert without == [], "every flag is read from an environment variable"  # TGI's --env and -V have none
    assert [f.name for f in FLAGS if f.kind != "version" and f.example is None] == ["--env"]


def test_every_flag_is_in_tgi_launch_help_with_its_variables():
    launch = build_parser()._subparsers._group_actions[0].choices["launch"]
    text = " ".join(launch.format_help().split())
    for flag in FLAGS:
        for name in flag.names:
            assert re.search(rf"(^|[ ,\[]){re.escape(name)}\b", text), f"{name} is missing from --help"
        if flag.env:
            suffix = f"[env: {flag.env_help or ', '.join(flag.env)}]"
            assert suffix in text, f"--help does not name {flag.name}'s variables: {suffix}"
            assert all(v in suffix for v in flag.env)


@pytest.mark.parametrize("flag", [f for f in WITH_EXAMPLE if f.env], ids=lambda f: f.name)
def test_every_flag_is_read_from_each_of_its_variables(monkeypatch, flag):
    by_flag = getattr(parse(given(flag)), flag.dest)
    default = getattr(parse([]), flag.dest)
    assert by_flag != default, f"the example of {flag.name} is its default: it shows nothing"
    for variable in flag.env:
        monkeypatch.setenv(variable, flag.example)
        assert getattr(parse([]), flag.dest) == by_flag, f"{variable} is not read as {flag.name}"
        monkeypatch.delenv(variable)


FREE_TEXT = [
    f
    for f in FLAGS
    if f.kind in ("value", "list", "repeat") and f.choices is None and f.parse in (None, comma_list)
]


@pytest.mark.parametrize("flag", [f for f in FLAGS if f.env and f not in FREE_TEXT], ids=lambda f: f.name)
def test_a_bad_value_in_a_variable_is_refused_naming_the_flag(monkeypatch, capsys, flag):
    monkeypatch.setenv(flag.env[0], "-not-a-value-")
    with pytest.raises(SystemExit) as exit_:
        parse([])
    assert exit_.value.code == 2 and flag.name in capsys.readouterr().err


def _destination(args: argparse.Namespace, to) -> object:
    if isinstance(to, Engine):
        return getattr(engine_config(args), to.field)
    return getattr(server_settings(args), to.field)


def _field_default(fields: type, name: str) -> object:
    [field] = [f for f in dataclasses.fields(fields) if f.name == name]
    return field.default_factory() if field.default is dataclasses.MISSING else field.default


@pytest.mark.parametrize(
    "flag", [f for f in SERVED if isinstance(f.to, (Engine, Server)) and f.example], ids=lambda f: f.name
)
def test_every_served_flag_reaches_its_destination(flag):
    fields = EngineConfig if isinstance(flag.to, Engine) else ServerSettings
    assert flag.to.field in {f.name for f in dataclasses.fields(fields)}
    args = parse([*given(flag), *flag.example_needs])
    value = getattr(args, flag.dest)
    expected = flag.to.derive(args) if flag.to.derive is not None else value
    assert _destination(args, flag.to) == expected
    assert _destination(args, flag.to) != _field_default(fields, flag.to.field), (
        f"{flag.name} {flag.example} changes nothing in {fields.__name__}.{flag.to.field}"
    )


@pytest.mark.parametrize("flag", [f for f in FLAGS if f.refusal is not None], ids=lambda f: f.name)
def test_every_refused_flag_stops_the_start_naming_it_unless_it_asks_for_nothing(monkeypatch, flag):
    for build in (engine_config, server_settings):
        with pytest.raises(ConfigError, match=re.escape(f"{flag.name}") + r"\b.*is not supported: "):
            build(parse(given(flag)))
    monkeypatch.setenv(flag.env[0], flag.example if flag.kind != "switch" else "true")
    with pytest.raises(ConfigError, match=re.escape(flag.env[0])):
        engine_config(parse([]))
    monkeypatch.delenv(flag.env[0])
    if flag.refusal.neutral is not None:
        engine_config(parse([flag.name, str(flag.refusal.neutral)]))
    engine_config(parse([]))


@pytest.mark.parametrize("flag", [f for f in FLAGS if f.at_least is not None], ids=lambda f: f.name)
def test_a_value_below_a_flags_least_is_refused_by_name(flag):
    below = str(int(flag.at_least) - 1)
    for build in (engine_config, server_settings):
        with pytest.raises(
            ConfigError, match=re.escape(f"{flag.name} must be >= {flag.at_least}, got {below}")
        ):
            build(parse([flag.name, below]))


def test_the_pages_tables_are_the_ones_the_flag_table_makes():
    """After adding or changing a flag: `python -m tgi.server.flags --update docs/reference/flags.md`."""
    text = PAGE.read_text(encoding="utf-8")
    assert page_block(text) == compatibility_markdown()
    assert page_block(text, REFERENCE_BEGIN, REFERENCE_END) == reference_markdown()


def test_every_tgi_flag_and_every_flag_of_ours_is_in_the_compatibility_table():
    block = compatibility_markdown()
    for flag in FLAGS:
        assert "/".join(f"`{n}`" for n in flag.names) in block, flag.name


def test_every_flag_of_tgi_launch_help_is_in_the_reference_with_its_variables_and_help():
    """What `tgi launch --help` offers, read from its parser (not from the table), is on the page: each
    option in a row with the help it shows and each variable it names."""
    reference = page_block(PAGE.read_text(encoding="utf-8"), REFERENCE_BEGIN, REFERENCE_END)
    rows = {}
    for line in reference.splitlines():
        if line.startswith("| `"):
            for name in line[2:].split(" | ", 1)[0].split("/"):
                rows[name.strip("`")] = line
    launch = build_parser()._subparsers._group_actions[0].choices["launch"]
    actions = [a for a in launch._actions if a.option_strings and a.option_strings[0] not in ("-h", "--help")]
    assert len(actions) == len(FLAGS)
    for action in actions:
        for option in action.option_strings:
            assert option in rows, f"{option} of `tgi launch --help` is missing from {PAGE.name}"
        row = rows[action.option_strings[0]]
        shown, _, variables = action.help.partition(" [env: ")
        assert shown.replace("|", "\\|") in row, f"{action.option_strings[0]}'s help is not in its row"
        for variable in re.findall(r"\b[A-Z][A-Z0-9_]{2,}\b", variables):
            assert f"`{variable}`" in row, (
                f"{action.option_strings[0]}'s variable {variable} is not in its row"
            )


def test_the_markdown_commands_print_the_blocks_and_update_writes_both(tmp_path):
    for option, block in (("--markdown", compatibility_markdown()), ("--reference", reference_markdown())):
        done = subprocess.run(
            [sys.executable, "-m", "tgi.server.flags", option], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0 and done.stdout.strip() == block, done.stderr
    copy = tmp_path / "flags.md"
    page = PAGE.read_text(encoding="utf-8")
    stale = page.replace("| `--sharded` |", "| `--stale` |").replace("| `--revision` |", "| `--stale` |")
    assert stale.count("`--stale`") == 3 and END in stale  # --sharded's rows in both blocks, --revision's
    copy.write_text(stale)
    subprocess.run([sys.executable, "-m", "tgi.server.flags", "--update", str(copy)], check=True, timeout=120)
    assert copy.read_text(encoding="utf-8") == page
