"""The out-of-tree example backend (examples/tgi-backend-example) passes the conformance suite, run exactly
as its own package would run it."""

from __future__ import annotations

import pathlib
import sys

from tgi.core.torch.testing import TorchBackendConformance

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "tgi-backend-example"


class TestExampleConformance(TorchBackendConformance):
    def make_backend(self):
        if str(EXAMPLE) not in sys.path:
            sys.path.insert(0, str(EXAMPLE))
        from tgi_backend_example.backend import ExampleBackend

        return ExampleBackend()
