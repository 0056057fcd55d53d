"""transformers' own model of a GGUF file, the reference parity tests hold the engine to, loaded once per machine.

`AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)` is the independent reading of a GGUF file the
tests compare with (transformers' dequantization and tensor layout, not tgi's). It takes ~24 s for the
default model on a 2-core machine: gguf's reader parses the 49k-token vocabulary twice and transformers
rebuilds its tensor-name map for every tensor. What it builds is saved once as a safetensors checkpoint in
float32 (`save_pretrained` under `$TGI_CACHE_DIR/transformers-gguf/`, default `~/.cache/tgi/`, keyed as the
tokenizer cache is: the file's path, size and mtime and transformers' version), converted under a file lock
so that two test workers convert it once, and moved into place whole (`tgi.core.testing.folder_once`); later
loads read the checkpoint in about a second and give the same tensors (tests/unit/core/testing/test_transformers_gguf.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_CACHE_FORMAT = "1"  # bump when what is cached changes


def cached_checkpoint(gguf_path: str | Path) -> Path:
    """The folder transformers' float32 model of `gguf_path` is (or will be) saved in."""
    from tgi.core.tokenization import gguf_cache_entry

    return gguf_cache_entry(gguf_path, "transformers-gguf", _CACHE_FORMAT)


def _save(model, folder: Path) -> None:
    """The dequantized model as a plain checkpoint: transformers refuses `save_pretrained` on a model it read
    from GGUF (its quantizer is not serializable), so the config is saved without its `quantization_config`
    (the weights are plain tensors already) and the tensors with safetensors (tied ones stored once)."""
    import copy

    from safetensors.torch import save_model

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    save_model(model, str(folder / "model.safetensors"), metadata={"format": "pt"})


def load_transformers_gguf(gguf_path: str | Path, dtype: Any = None, use_cache: bool = True):
    """transformers' model of the GGUF file at `gguf_path` (dequantized), in `dtype` (default float32), in eval
    mode: read from the cached checkpoint when there is one, else converted by transformers and cached."""
    import torch
    from transformers import AutoModelForCausalLM

    from tgi.core.testing.folder_once import build_folder_once

    dtype = dtype or torch.float32
    path = Path(gguf_path)
    if not use_cache:
        return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype).eval()

    def convert(folder: Path) -> None:
        _save(
            AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32),
            folder,
        )

    folder = build_folder_once(cached_checkpoint(path), convert)
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
