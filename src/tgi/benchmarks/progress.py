"""The benchmarks' progress display on stderr."""

from __future__ import annotations

import sys


class Progress:
    """tqdm on stderr when installed (and stderr is a terminal); otherwise a line per level."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="req", file=sys.stderr, dynamic_ncols=True, mininterval=1.0)
            except ImportError:
                pass

    def describe(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_description(text)

    def tick(self, _result=None) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
