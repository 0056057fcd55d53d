"""The documentation's map (docs/map.md) stays true to the repository: every top-level folder and every package
has its line, every path a line names exists."""

from __future__ import annotations

import pathlib
import re
import subprocess

import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: the folder whose packages install (pyproject.toml's package-dir: the src layout)
SRC = ROOT / tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"][""]


MAP = ROOT / "docs" / "map.md"


def _section(title: str) -> str:
    return MAP.read_text().split(f"\n## {title}\n", 1)[1].split("\n#", 1)[0]


def _layout_rows() -> list[tuple[list[str], str, str]]:
    """The rows of the table under "## Packages": (the paths its first cell names, its import path, its job)."""
    section = _section("Packages")
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("folder", "---"):
            continue
        rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1].strip("`"), cells[2]))
    assert rows, "docs/map.md has no package table under '## Packages'"
    return rows


def _packages() -> dict[str, str]:
    """Every package folder (relative, ending in '/') and its import path; and every folder of tests/ (each a
    suite or the code tests share; tests/unit/'s folders mirror the source and go with tests/unit/)."""
    packages = {}
    for init in sorted(SRC.rglob("__init__.py")):
        relative = init.parent.relative_to(ROOT)
        if "build" in relative.parts:
            continue
        packages[relative.as_posix() + "/"] = ".".join(init.parent.relative_to(SRC).parts)
    for folder in sorted((ROOT / "tests").iterdir()):
        if folder.is_dir() and folder.name != "__pycache__":
            packages[folder.relative_to(ROOT).as_posix() + "/"] = ""
    return packages


def test_every_package_has_a_line_with_its_job():
    named = {path for paths, _, _ in _layout_rows() for path in paths}
    missing = sorted(set(_packages()) - named)
    assert not missing, f"docs/map.md's package table has no line for these packages: {missing}"
    assert {
        "src/tgi/core/",
        "src/tgi/core/interfaces/",
        "src/tgi/backends/cpu/native/",
        "tests/unit/",
    } <= named


def test_every_path_the_table_names_exists():
    missing = [path for paths, _, _ in _layout_rows() for path in paths if not (ROOT / path).exists()]
    assert not missing, f"docs/map.md's package table names paths that do not exist: {missing}"


def test_a_package_line_gives_its_import_path_and_its_job():
    packages = _packages()
    for paths, import_path, job in _layout_rows():
        assert job, f"the line of {paths} says nothing of what it holds"
        folders = [path for path in paths if packages.get(path)]
        if len(paths) == 1 and folders:
            assert import_path == packages[folders[0]], f"{folders[0]} is {packages[folders[0]]}"


def _top_level_rows() -> list[tuple[list[str], str, str]]:
    """The rows of the table under "## Top-level folders": (the folders its first cell names, its job, its
    boundary)."""
    rows = []
    for line in _section("Top-level folders").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("folder", "---"):
            continue
        rows.append(([p for p in re.findall(r"`([^`]+)`", cells[0]) if p.endswith("/")], cells[1], cells[2]))
    assert rows, "docs/map.md has no table under '## Top-level folders'"
    return rows


def _top_folder(path: str) -> str:
    """The top-level folder `path` is in; under the src layout's `src/tgi/`, the package's folder (each of
    core, backends, server, benchmarks has its own line and boundary)."""
    parts = path.split("/")
    if parts[:2] == ["src", "tgi"] and len(parts) > 3:
        return "src/tgi/" + parts[2] + "/"
    return parts[0] + "/"


def test_every_top_level_folder_has_a_line_with_its_boundary():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    folders = {_top_folder(path) for path in tracked.splitlines() if "/" in path}
    rows = _top_level_rows()
    named = {folder for folders_, _, _ in rows for folder in folders_}
    assert not folders - named, (
        f"docs/map.md names no line for these top-level folders: {sorted(folders - named)}"
    )
    assert not named - folders, (
        f"docs/map.md names top-level folders that are not there: {sorted(named - folders)}"
    )
    for folders_, job, boundary in rows:
        assert job and boundary, f"the line of {folders_} must say what it holds and its boundary"
