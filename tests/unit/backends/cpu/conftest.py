"""The CPU backend's kernels are tested on every core of the machine, also on a pytest-xdist worker (whose
processes compute on one thread, tests/conftest.py): their OpenMP loops split the work by the thread count,
and a split that only a second thread takes must be run here."""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def every_core():
    before = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    yield
    torch.set_num_threads(before)
