"""Shared test set-up.

Plugins that happen to be installed on the machine are ignored: only the in-tree `cpu` backend is loaded
from entry points unless a test asks for more (`TGI_PLUGINS`).
"""

from __future__ import annotations

import os

import pytest
import torch
from cpu_features import MISSING_CPU_FEATURE

os.environ.setdefault("TGI_PLUGINS", "cpu")
# Without a GPU, Triton kernels (CUDA/ROCm/XPU backends) run on CPU tensors in Triton's interpreter; it must be
# switched on before triton is first imported, so it is set here, before any test module loads.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# tests never reach a model hub
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter) -> None:
    """Say how many tests this machine could not run for lack of a CPU feature (AMX on an AMD EPYC, ...):
    a run on one kind of machine leaves the other kind's kernel paths untested."""
    skipped = terminalreporter.stats.get("skipped", [])
    features: dict[str, int] = {}
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if MISSING_CPU_FEATURE in reason:
            what = reason.split(MISSING_CPU_FEATURE, 1)[1].lstrip(": ")
            features[what] = features.get(what, 0) + 1
    if features:
        parts = ", ".join(f"{n} for lack of {what}" for what, n in sorted(features.items()))
        terminalreporter.write_line(
            f"{sum(features.values())} tests skipped for a CPU feature this machine lacks ({parts})"
        )
