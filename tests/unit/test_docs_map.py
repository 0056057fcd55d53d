"""README.md's layout table stays a true map of the repository: every package has its line, every path a line
names exists."""

from __future__ import annotations

import pathlib
import re

import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: the folders that install as `tgi` packages: pyproject.toml's package-dir, folder -> import path
PACKAGE_ROOTS = {
    folder: package
    for package, folder in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ].items()
}


def _layout_rows() -> list[tuple[list[str], str, str]]:
    """The rows of the table under "## Layout": (the paths its first cell names, its import path, its job)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("folder", "---"):
            continue
        rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1].strip("`"), cells[2]))
    assert rows, "README.md has no layout table under '## Layout'"
    return rows


def _packages() -> dict[str, str]:
    """Every package folder (relative, ending in '/') and its import path; and every folder of tests/ (each a
    suite or the code tests share; tests/unit/'s folders mirror the source and go with tests/unit/)."""
    packages = {}
    for folder, package in PACKAGE_ROOTS.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            relative = init.parent.relative_to(ROOT)
            if "build" in relative.parts:
                continue
            packages[relative.as_posix() + "/"] = ".".join([package, *relative.parts[1:]])
    for folder in sorted((ROOT / "tests").iterdir()):
        if folder.is_dir() and folder.name != "__pycache__":
            packages[folder.relative_to(ROOT).as_posix() + "/"] = ""
    return packages


def test_every_package_has_a_line_with_its_job():
    named = {path for paths, _, _ in _layout_rows() for path in paths}
    missing = sorted(set(_packages()) - named)
    assert not missing, f"README.md's layout table has no line for these packages: {missing}"
    assert {"core/", "core/interfaces/", "backends/cpu/native/", "tests/unit/"} <= named


def test_every_path_the_table_names_exists():
    missing = [path for paths, _, _ in _layout_rows() for path in paths if not (ROOT / path).exists()]
    assert not missing, f"README.md's layout table names paths that do not exist: {missing}"


def test_a_package_line_gives_its_import_path_and_its_job():
    packages = _packages()
    for paths, import_path, job in _layout_rows():
        assert job, f"the line of {paths} says nothing of what it holds"
        folders = [path for path in paths if packages.get(path)]
        if len(paths) == 1 and folders:
            assert import_path == packages[folders[0]], f"{folders[0]} is {packages[folders[0]]}"
