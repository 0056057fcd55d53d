"""The loading tests' cache folder: one of the run's own (`TGI_CACHE_DIR`), never the user's."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TGI_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tgi-cache"))
