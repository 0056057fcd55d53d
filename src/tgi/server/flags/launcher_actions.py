"""What the launcher does for its own flags (`LAUNCHER` in the table) before the model loads: the hub cache
(`--huggingface-hub-cache`), the environment report (`--env`), the chat template (`--tokenizer-config-path`),
and the warning of a server with the run-time LoRA routes on."""

from __future__ import annotations

import json
import os
import platform
import sys

from tgi.core.config import ConfigError
from tgi.server.flags.value_checks import tokenizer_config_file


def tokenizer_config(path: str) -> dict:
    """The JSON at `path` (`--tokenizer-config-path`); `ConfigError` if it cannot be read or has no
    `chat_template` (the one thing this server takes from it)."""
    problem = tokenizer_config_file(path)
    if problem is not None:
        raise ConfigError(f"--tokenizer-config-path {problem}")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def apply_hub_cache(path: str | None) -> None:
    """`--huggingface-hub-cache`: where huggingface_hub downloads and looks (this process, and the shard
    processes it starts, which read the variable)."""
    if not path:
        return
    os.environ["HF_HUB_CACHE"] = os.environ["HUGGINGFACE_HUB_CACHE"] = path
    hub = sys.modules.get("huggingface_hub.constants")
    if hub is not None:  # imported already: its constant was read from the old environment
        hub.HF_HUB_CACHE = hub.HUGGINGFACE_HUB_CACHE = path


def environment_report() -> str:
    """`--env`: what a bug report needs about this machine."""
    import importlib.metadata as md

    lines = [f"Platform: {platform.platform()}", f"Python: {sys.version.split()[0]}"]
    for dist in ("tgi", "torch", "transformers", "tokenizers", "huggingface-hub", "triton", "jax"):
        try:
            lines.append(f"{dist}: {md.version(dist)}")
        except md.PackageNotFoundError:
            continue
    try:
        import torch

        if torch.cuda.is_available():
            lines.append(
                f"GPUs: {', '.join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))}"
            )
    except ImportError:
        pass
    return "\n".join(lines)


def runtime_lora_warning(lora_root: str) -> str:
    """The start-up warning of a server with the run-time LoRA routes on."""
    return (
        "--allow-runtime-lora-updating: clients holding the admin key can make this server read adapter files "
        f"under {lora_root} and change what every client gets"
    )
