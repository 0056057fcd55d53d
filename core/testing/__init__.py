"""Test helpers that backends reuse: the backend conformance suite and its references.

A third-party backend runs the suite with a test module of five lines::

    from tgi.core.testing import BackendConformance

    class TestMyChipConformance(BackendConformance):
        def make_backend(self):
            return MyChipBackend()

(`pytest` must be installed; see `tgi.core.testing.conformance` for what is checked and the knobs.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tgi.core.testing.conformance import BackendConformance

__all__ = ["BackendConformance"]


def __getattr__(name: str):
    # lazy: importing tgi.core.testing must not need pytest
    if name == "BackendConformance":
        from tgi.core.testing.conformance import BackendConformance

        return BackendConformance
    raise AttributeError(name)
