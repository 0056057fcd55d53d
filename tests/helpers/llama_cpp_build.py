"""A llama.cpp build on this machine for the benchmarks' tests, and the tiny model shape they make with it."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from tgi.benchmarks.llama_cpp_tools import LlamaCppTools, find_tools
from tgi.benchmarks.make_model import ModelShape

#: Llama shapes small enough for a test, with the default model's vocabulary (K-quant rows of 256)
TINY = ModelShape(hidden=256, intermediate=512, layers=2, heads=4, kv_heads=2, head_dim=64, context=256)
NO_TOOLS = LlamaCppTools(None, None, None)


def llama_cpp_tools() -> LlamaCppTools:
    """llama.cpp's tools: $TGI_LLAMA_CPP_DIR, else beside llama-server on PATH, else the build
    ../shared/PEERS.md describes (~/peers/llama_cpp_python-*/vendor/llama.cpp); NO_TOOLS when none."""
    if os.environ.get("TGI_LLAMA_CPP_DIR"):
        return find_tools(os.environ["TGI_LLAMA_CPP_DIR"])
    if shutil.which("llama-server"):
        return find_tools(None, shutil.which("llama-server"))
    builds = sorted(glob.glob(str(Path.home() / "peers" / "llama_cpp_python-*" / "vendor" / "llama.cpp")))
    return find_tools(builds[-1]) if builds else NO_TOOLS
