"""Loading the native kernels: built once into the content-keyed cache (`build`), then loaded from it, under
the build folder's kernel lock (`build_lock`). A failed build is not retried in the same process: `load()`
raises `NativeBuildError` again with the compiler's reason."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from types import ModuleType

from tgi.backends.cpu.native import build
from tgi.backends.cpu.native.build_lock import build_lock

__all__ = ["NativeBuildError", "available", "compiler_found", "load"]

log = logging.getLogger(__name__)
_lock = threading.Lock()
_module: ModuleType | None = None
_error: NativeBuildError | None = None


class NativeBuildError(RuntimeError):
    """The native CPU kernels could not be compiled or loaded here."""


def _ensure_ninja() -> None:
    # torch looks for `ninja` on PATH; the `ninja` wheel installs it next to the interpreter, which is not
    # on PATH when a virtual environment is used without being activated
    if shutil.which("ninja") is None:
        try:
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        except ImportError:
            pass


def load(ahead: bool = False) -> ModuleType:
    """The compiled extension (built on first call); raises `NativeBuildError` with the reason. `ahead`: the
    build was asked for (`python -m tgi.backends.cpu.native build`), so a compile is not warned about as one
    that a serving process had to do at first use."""
    global _module, _error
    if _module is not None:
        return _module
    with _lock:
        if _module is not None:
            return _module
        if _error is not None:
            raise _error
        from torch.utils.cpp_extension import load as load_extension

        _ensure_ninja()
        log.info(
            "loading the native CPU kernels, compiling them first if no build of these sources is cached "
            "(`make install` and `python -m tgi.backends.cpu.native build` build them ahead)"
        )
        start = time.perf_counter()
        try:
            digest = build.source_digest()
            folder = build.build_dir(digest)
            with build_lock(str(folder)):
                if build.finished(folder):
                    # built for this content already: imported as it is. torch's `load` would run ninja,
                    # which compiles again for another virtual environment (its torch headers' paths differ)
                    _module = build.import_library(folder)
                else:
                    _module = load_extension(
                        name=build.EXT_NAME,
                        sources=build.stage(folder),
                        extra_cflags=list(build.FLAGS),
                        extra_ldflags=list(build.LDFLAGS),
                        extra_include_paths=[str(folder / "src")],
                        build_directory=str(folder),
                        verbose=False,
                    )
                    build.mark_finished(folder, digest)
        except Exception as e:  # compiler missing, compile error, ninja missing, ...
            _error = NativeBuildError(f"could not build the native CPU kernels: {e}")
            raise _error from e
        took = time.perf_counter() - start
        if took > 5 and not ahead:  # a cached library loads in well under a second
            log.warning(
                "compiled the native CPU kernels at first use (%.0f s); build them ahead with "
                "`python -m tgi.backends.cpu.native build` (make install does)",
                took,
            )
        return _module


def compiler_found() -> bool:
    """Whether this machine has a C++ compiler to build the kernels with (`$CXX`, `c++` or `g++`). Where
    it has one, a failed build is a defect to report, not a missing feature."""
    return bool(os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++"))


def available() -> bool:
    """Whether the native kernels build (or are built) here; builds them on first call."""
    try:
        load()
    except NativeBuildError:
        return False
    return True
