"""What the e2e tests read of a server process's memory."""

from __future__ import annotations

from pathlib import Path


def rss_mib(pid: int) -> float:
    """The resident set of process `pid` (VmRSS), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")
