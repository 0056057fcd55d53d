"""What a backend's `probe()` reads of the host, behind one object that tests replace (no framework here).

A probe must tell the user why a backend cannot run: its package is missing, no device is there, or the
driver is too old. `HostView` is how probes import packages, list device nodes and read driver versions,
so that each of those answers can be tested on a machine that has none of the hardware.
"""

from __future__ import annotations

import glob
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class HostView:
    """The host as a probe sees it."""

    import_module: Callable[[str], ModuleType] = importlib.import_module  # raises ImportError when missing
    glob: Callable[[str], list[str]] = field(default=lambda pattern: sorted(glob.glob(pattern)))
    read_text: Callable[[str], str | None] = _read_text  # a file's stripped text, None when unreadable


def version_tuple(text: str | None) -> tuple[int, ...]:
    """The leading dotted numbers of a version string ("1.22.0-abc" -> (1, 22, 0)); () when none."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()
