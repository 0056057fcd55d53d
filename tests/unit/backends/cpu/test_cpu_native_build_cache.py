"""The native kernels' build cache is keyed by the sources' content, not their path: another clone of the same
sources (CI's fresh clone beside a developer's checkout) loads the library `make install` built, and a process
that points `TGI_CACHE_DIR` at an empty folder does not compile again."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

from tgi.backends.cpu.native import build


def test_the_digest_follows_the_content_not_the_folder(tmp_path, monkeypatch):
    here = build.source_digest()
    clone = tmp_path / "clone"
    shutil.copytree(build.SOURCE_DIR, clone, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.setattr(build, "SOURCE_DIR", clone)
    assert build.source_digest() == here, "the same sources in another folder must find the same build"
    header = clone / "common.h"
    header.write_text(header.read_text() + "\n// changed\n")
    assert build.source_digest() != here, "a changed header must not load the old library"


def test_staged_sources_are_copied_once_and_compiled_from_the_build_folder(tmp_path):
    sources = build.stage(tmp_path)
    assert sources and all(s.startswith(str(tmp_path / "src")) for s in sources)
    assert {p.name for p in (tmp_path / "src").iterdir()} == {
        p.name for p in [*build.SOURCE_DIR.glob("*.cpp"), *build.SOURCE_DIR.glob("*.h")]
    }
    assert build.stage(tmp_path) == sources


def test_a_fresh_cache_dir_loads_the_library_already_built(tmp_path):
    """A fresh process with `TGI_CACHE_DIR` set to an empty folder loads the library built by `make install`
    under torch's default root: nothing is built under the new folder."""
    script = textwrap.dedent(
        """
        from tgi.backends.cpu import native
        from tgi.backends.cpu.native import build
        print(native.load().__file__)
        print(build.build_dir(build.source_digest()))
        """
    )
    env = {**_environ(), "TGI_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    library, folder = done.stdout.split()
    assert not (tmp_path / "torch_extensions").exists(), f"built again under the fresh cache dir: {library}"
    assert library.startswith(folder) and build.source_digest() in folder


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("TGI_CACHE_DIR", "TORCH_EXTENSIONS_DIR")}


def test_a_finished_build_is_imported_without_torchs_build_step():
    """Another virtual environment (a fresh clone's `.venv`: other paths to torch's headers) would have torch's
    `load` run ninja, which compiles again: a finished build is imported as it is."""
    script = textwrap.dedent(
        """
        import torch.utils.cpp_extension as ext
        def refuse(*args, **kwargs):
            raise AssertionError("torch's load was called: the finished build would be compiled again")
        ext.load = refuse
        from tgi.backends.cpu import native
        print(native.load().__file__)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=_environ()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert build.source_digest() in done.stdout
