"""Shared test set-up.

Plugins that happen to be installed on the machine are ignored: only the in-tree `cpu` backend is loaded
from entry points unless a test asks for more (`TGI_PLUGINS`).
"""

from __future__ import annotations

import os

os.environ.setdefault("TGI_PLUGINS", "cpu")
# tests never reach a model hub
os.environ.setdefault("HF_HUB_OFFLINE", "1")
