"""Native (C++) CPU kernels, compiled at first use with `torch.utils.cpp_extension.load_inline`.

The build needs a C++ compiler (g++) and ninja (a dependency of tgi); it is cached by torch under
`$TORCH_EXTENSIONS_DIR` (default `~/.cache/torch_extensions`), or under `$TGI_CACHE_DIR/torch_extensions`
when that is set. The first build takes tens of seconds; later processes load the cached library.

A failed build is not retried in the same process: `load()` raises `NativeBuildError` again with the
compiler's reason.
"""

from __future__ import annotations

import os
import shutil
import threading
from types import ModuleType

import torch

__all__ = ["NativeBuildError", "available", "load", "paged_decode"]

_EXT_NAME = "tgi_cpu_paged_attention"
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


def _build_dir() -> str | None:
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return None  # torch's own setting wins
    base = os.environ.get("TGI_CACHE_DIR")
    if not base:
        return None
    path = os.path.join(base, "torch_extensions", _EXT_NAME)
    os.makedirs(path, exist_ok=True)
    return path


def load() -> ModuleType:
    """The compiled extension (built on first call); raises `NativeBuildError` with the reason."""
    global _module, _error
    if _module is not None:
        return _module
    with _lock:
        if _module is not None:
            return _module
        if _error is not None:
            raise _error
        from torch.utils.cpp_extension import load_inline

        from tgi.backends.cpu.native.paged_attention_src import CPP_SOURCE

        _ensure_ninja()
        try:
            _module = load_inline(
                name=_EXT_NAME,
                cpp_sources=[CPP_SOURCE],
                functions=["paged_decode"],
                extra_cflags=["-O3", "-fopenmp", "-fno-math-errno"],
                extra_ldflags=["-fopenmp"],
                build_directory=_build_dir(),
                verbose=False,
            )
        except Exception as e:  # compiler missing, compile error, ninja missing, ...
            _error = NativeBuildError(f"could not build the native CPU attention kernel: {e}")
            raise _error from e
        return _module


def available() -> bool:
    """Whether the native kernels build (or are built) here; builds them on first call."""
    try:
        load()
    except NativeBuildError:
        return False
    return True


def paged_decode(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Decode attention straight through the block table.

    q [D, H, Dh] (float32 or bfloat16), key_cache/value_cache [num_blocks, block_size, Hkv, Dh] (q's dtype),
    block_tables [D, max_blocks] int32, seq_lens [D] int32 (keys per sequence, the new one included)
    -> [D, H, Dh]. Scores and softmax in float32; `sliding_window` keeps the last that many keys,
    `softcap` applies `softcap * tanh(score / softcap)`.
    """
    return load().paged_decode(
        q,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        float(scale),
        -1 if sliding_window is None else int(sliding_window),
        0.0 if softcap is None else float(softcap),
    )
