"""Where a model's files are, once resolved (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ModelSource:
    """A model resolved to local files."""

    model_id: str  # what the user asked for (or the default model's name)
    format: Literal["gguf", "safetensors"]
    path: str  # the .gguf file, or the folder holding config.json and *.safetensors
    tokenizer_path: str  # folder with tokenizer files, or the .gguf file (its tokenizer is embedded)
    # ("linear" | "dynamic", factor) in place of the checkpoint's rope scaling (TGI's --rope-scaling and
    # --rope-factor); None: the checkpoint's own
    rope_scaling: tuple[str, float] | None = None
    # a Medusa checkpoint's folder (TGI's layout) whose heads guess this model's tokens (--speculate)
    speculator: str | None = None
    # --trust-remote-code: a config, tokenizer or (transformers fallback) causal-LM class of the checkpoint's
    # own (`auto_map`, *.py in the folder) may run; without it such a checkpoint is refused naming the flag
    trust_remote_code: bool = False
