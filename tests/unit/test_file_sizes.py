"""No source file of the project over 400 lines, tests included, C++ included: a file that grows past it is
split along its seams (one job per module), not raised past the bound. The files are those git tracks, plus
new ones not ignored (a clean clone has the same)."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_LINES = 400
SOURCE_SUFFIXES = {".py", ".c", ".cc", ".cpp", ".h", ".hpp", ".cu"}


def _source_files() -> list[pathlib.Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
        ).stdout.splitlines()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the files to check are those git lists")
    return [ROOT / name for name in listed if pathlib.Path(name).suffix in SOURCE_SUFFIXES]


def test_no_source_file_is_over_400_lines():
    files = [f for f in _source_files() if f.is_file()]
    assert len(files) > 100  # the listing found the tree
    long = {str(f.relative_to(ROOT)): n for f in files if (n := len(f.read_bytes().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines (split each along its seams): {long}"
