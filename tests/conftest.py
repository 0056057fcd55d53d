"""Shared test set-up.

Plugins that happen to be installed on the machine are ignored: only the in-tree `cpu` backend is loaded
from entry points unless a test asks for more (`TGI_PLUGINS`).
"""

from __future__ import annotations

import os

import torch

os.environ.setdefault("TGI_PLUGINS", "cpu")
# Without a GPU, Triton kernels (CUDA/ROCm/XPU backends) run on CPU tensors in Triton's interpreter; it must be
# switched on before triton is first imported, so it is set here, before any test module loads.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# tests never reach a model hub
os.environ.setdefault("HF_HUB_OFFLINE", "1")
