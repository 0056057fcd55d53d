"""Files built once per test run and shared by its pytest-xdist workers.

Each worker has its own temporary folder (`tmp_path_factory.getbasetemp()`, `.../popen-gwN`); their parent is
the run's. A file built there under a lock is built by the first worker that asks and read by the others,
and is gone with the run's temporary folders: nothing outlives the run, so a change to what builds it is
always seen by the next run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's temporary folder shared by its workers (a worker's own folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """`run_folder/shared/name`, made by `build(folder)` into a fresh folder the first time any worker asks
    (under a file lock, then moved into place whole), and the same folder for every later call of the run."""
    from tgi.core.testing.folder_once import build_folder_once

    return build_folder_once(run_folder(tmp_path_factory) / "shared" / name, build)
