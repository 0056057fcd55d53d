"""Where the native kernels are built and found: a cache keyed by the content of the sources, not their path.

torch's `cpp_extension.load` keys its build folder by the extension's name alone and writes the sources' absolute
paths into the folder's `build.ninja`: two clones of the project on one machine (a developer's checkout and CI's
fresh clone, two worktrees) each rewrote the other's `build.ninja` and each start of one rebuilt the kernels for
minutes. Here the folder is named by a digest of everything that decides the library (every `.cpp` and `.h`,
the compiler flags, torch's version), and the sources are compiled from a copy staged inside that folder, so the
same content anywhere on the machine finds the same, already built library.

Roots searched, in order: `$TORCH_EXTENSIONS_DIR`, `$TGI_CACHE_DIR/torch_extensions`, torch's default
(`~/.cache/torch_extensions/<python>_<device>`). A library already built for this digest under any of them is
imported from there as it is, without torch's `load` (whose ninja step compiles again for another virtual
environment, the paths of its torch headers being others): a process that sets `TGI_CACHE_DIR` to a fresh
folder, or a fresh clone with its own `.venv`, does not compile again what `make install` built. With none,
the first root that is set is built into.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import sys
import tempfile
from types import ModuleType

import torch

__all__ = [
    "EXT_NAME",
    "FLAGS",
    "LDFLAGS",
    "SOURCE_DIR",
    "build_dir",
    "built_library",
    "source_digest",
    "stage",
]

EXT_NAME = "tgi_cpu_kernels"
#: the folder of the C++ sources (`*.cpp`, compiled and linked into one library) and their headers (`*.h`)
SOURCE_DIR = pathlib.Path(__file__).resolve().parent
FLAGS = ("-O3", "-fopenmp", "-fno-math-errno")
LDFLAGS = ("-fopenmp",)
_SRC = "src"  # the staged copy of the sources inside a build folder
_FINISHED = "finished"  # written once a build's library loaded: a build killed midway leaves none


def _source_files() -> list[pathlib.Path]:
    files = sorted([*SOURCE_DIR.glob("*.cpp"), *SOURCE_DIR.glob("*.h")])
    if not any(f.suffix == ".cpp" for f in files) or not any(f.suffix == ".h" for f in files):
        raise FileNotFoundError(
            f"the C++ sources are missing from {SOURCE_DIR} (package data not installed?)"
        )
    return files


def source_digest() -> str:
    """A digest of what decides the compiled library: the name and content of every source and header, the
    flags, torch's and Python's versions and the compiler asked for (`$CXX`)."""
    digest = hashlib.sha256()
    for f in _source_files():
        digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    python = f"{sys.version_info.major}.{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    for part in (*FLAGS, "|", *LDFLAGS, "|", torch.__version__, python, "|", os.environ.get("CXX", "")):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def _roots() -> list[pathlib.Path]:
    roots = []
    if os.environ.get("TGI_CACHE_DIR"):
        roots.append(pathlib.Path(os.environ["TGI_CACHE_DIR"]).expanduser() / "torch_extensions")
    # `$TORCH_EXTENSIONS_DIR`, else torch's default root for this Python and build (`~/.cache/torch_extensions/
    # py311_cpu`): the folder torch's own helper puts an extension's folder in, asked for with no name
    from torch.utils.cpp_extension import _get_build_directory

    torch_root = pathlib.Path(_get_build_directory("", verbose=False))
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        roots.insert(0, torch_root)  # torch's own setting comes first
    else:
        roots.append(torch_root)
    return roots


def _folder(root: pathlib.Path, digest: str) -> pathlib.Path:
    return root / f"{EXT_NAME}-{digest}"


def finished(folder: pathlib.Path) -> bool:
    """Whether `folder` holds a library whose build finished and loaded."""
    return (folder / _FINISHED).is_file() and (folder / f"{EXT_NAME}.so").is_file()


def mark_finished(folder: pathlib.Path, digest: str) -> None:
    (folder / _FINISHED).write_text(digest + "\n")


def import_library(folder: pathlib.Path) -> ModuleType:
    """The finished library of `folder`, imported as the Python module it is (no compiler, no ninja)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(EXT_NAME, folder / f"{EXT_NAME}.so")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def built_library(digest: str) -> pathlib.Path | None:
    """The folder under any root that holds a finished build for `digest`, or None."""
    for root in _roots():
        folder = _folder(root, digest)
        if finished(folder):
            return folder
    return None


def build_dir(digest: str) -> pathlib.Path:
    """The folder to load from (one that already has this digest's library) or to build in (the first root)."""
    return built_library(digest) or _folder(_roots()[0], digest)


def stage(folder: pathlib.Path) -> list[str]:
    """Copy the sources into `folder/src` (once: a copy is renamed into place whole) and return the translation
    units to compile from there: paths that depend on the content only, so `build.ninja` never changes for
    another clone of the same sources."""
    src = folder / _SRC
    if not src.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        scratch = pathlib.Path(tempfile.mkdtemp(prefix=".src-", dir=folder))
        for f in _source_files():
            shutil.copy2(f, scratch / f.name)
        try:
            scratch.rename(src)
        except OSError:  # another process staged it first: the same content
            shutil.rmtree(scratch, ignore_errors=True)
    return sorted(str(p) for p in src.glob("*.cpp"))
