"""`python -m tgi.backends.cpu.native build`: compile the native CPU kernels now (what `make install` and
the CPU image's build run), into the cache later processes load them from (`$TGI_CACHE_DIR/torch_extensions`,
`$TORCH_EXTENSIONS_DIR`, or torch's default). Prints the library's path; exits 1 with the compiler's reason
when the build fails."""

from __future__ import annotations

import argparse
import sys
import time


def build() -> str:
    """Build (or find built) the kernels; returns the path of the loaded library. Raises `NativeBuildError`."""
    from tgi.backends.cpu import native

    return native.load(ahead=True).__file__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tgi.backends.cpu.native", description=__doc__)
    parser.add_argument("command", choices=["build"], help="build: compile the kernels into the cache")
    parser.parse_args(argv)
    from tgi.backends.cpu.native import NativeBuildError

    start = time.perf_counter()
    try:
        path = build()
    except NativeBuildError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"native CPU kernels ready in {time.perf_counter() - start:.1f} s: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
