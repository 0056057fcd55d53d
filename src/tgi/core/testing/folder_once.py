"""A folder built once, whoever asks for it: by the first process, under a file lock, into a temporary name
that is moved into place whole, so that no process ever reads it half-written."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path


def build_folder_once(target: Path, build: Callable[[Path], None]) -> Path:
    """`target`, made by `build(folder)` into a fresh empty folder the first time any process asks (under
    `target.lock`; another process waits for it, then finds the folder), and as it is on every later call."""
    from filelock import FileLock

    target = Path(target)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not target.is_dir():  # another process may have built it meanwhile
            tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            try:
                build(tmp)
                os.replace(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target
