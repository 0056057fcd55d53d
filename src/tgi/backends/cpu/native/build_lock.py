"""One process at a time through torch's extension build, and no build left waiting on a dead process.

`torch.utils.cpp_extension.load` guards its build folder with a file, `lock`, that it creates on entry and
deletes on exit, for every load, a cached one included. A process killed while it holds it (a server stopped
with SIGKILL while it starts, an OOM kill during the first build) leaves the file behind, and every later
load on this machine then waits for it forever, silently. `build_lock` puts a kernel lock (`flock`, released
by the kernel when its holder dies, however it dies) around torch's: whoever holds the kernel lock is the only
process that can be inside torch's, so a `lock` file found while holding it was left by a dead process and is
removed, with a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator

__all__ = ["TORCH_LOCK_NAME", "build_lock"]

log = logging.getLogger(__name__)

#: the file torch's `FileBaton` creates in the build folder while a process loads or builds there
TORCH_LOCK_NAME = "lock"
_KERNEL_LOCK_NAME = "tgi-build.flock"


@contextlib.contextmanager
def build_lock(build_dir: str) -> Iterator[None]:
    """Hold the build folder's kernel lock (waiting for another process's load or build to finish) and, once
    held, remove torch's `lock` file if a dead process left one. Released on exit, or when this process
    dies."""
    os.makedirs(build_dir, exist_ok=True)
    with open(os.path.join(build_dir, _KERNEL_LOCK_NAME), "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            stale = os.path.join(build_dir, TORCH_LOCK_NAME)
            if os.path.exists(stale):
                log.warning(
                    "removing %s: a process that was loading or building the native kernels died holding it "
                    "(left in place, every later load would wait for it forever)",
                    stale,
                )
                with contextlib.suppress(FileNotFoundError):
                    os.remove(stale)
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
