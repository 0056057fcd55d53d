"""What a model swap may read before its memory check passes: the new model's config, and nothing else.

`read_model_config(model_id, revision)` is `config.json` as plain JSON (never through transformers, so that no
checkpoint code runs): from a local folder; from the Hugging Face Hub, that one file (`hf_hub_download`), no
weight file; from a `.gguf` file (or the default model), its metadata header. `model_bytes(config, dtype,
kv_tokens)` is what its weights in `dtype` and a KV cache of `kv_tokens` take.
"""

from __future__ import annotations

import json
from pathlib import Path

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _looks_like_path(model_id: str) -> bool:
    """A path that does not exist (a hub id is "name" or "owner/name")."""
    return (
        model_id.startswith(("/", ".", "~")) or model_id.count("/") > 1 or model_id.lower().endswith(".gguf")
    )


def _gguf_config(path: str | None) -> dict:
    from tgi.core.loading import load_config, resolve_model

    return load_config(resolve_model(path)).to_dict()  # GGUF metadata only; `None`: the default model


def read_model_config(model_id: str | None, revision: str | None) -> dict:
    """`model_id`'s config as a dict (see the module docstring); `FileNotFoundError` / `ValueError` with the
    reason (for the log: it names paths)."""
    if not model_id:
        return _gguf_config(None)
    path = Path(model_id).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"{model_id}: a model file must be .gguf")
        return _gguf_config(str(path))
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            ggufs = list(path.glob("*.gguf"))
            if len(ggufs) == 1:
                return _gguf_config(str(ggufs[0]))
            raise FileNotFoundError(f"{model_id}: no config.json")
        return _parse(config)
    if _looks_like_path(model_id):
        raise FileNotFoundError(f"no such file or folder: {model_id}")
    import huggingface_hub

    return _parse(Path(huggingface_hub.hf_hub_download(model_id, "config.json", revision=revision)))


def _parse(path: Path) -> dict:
    config = json.loads(path.read_text())
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a JSON object")
    return config


def model_bytes(config: dict, dtype: str | None, kv_tokens: int) -> tuple[int, str]:
    """Bytes of the model of `config` (a `config.json` dict) in `dtype` (None: float32) with a KV cache of
    `kv_tokens`; and a short description. `KeyError` / `TypeError` for a config that lacks the sizes."""
    text = config.get("text_config") or config
    hidden, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
    heads = int(text["num_attention_heads"])
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    inter = int(text.get("intermediate_size") or 4 * hidden)
    experts = int(text.get("num_local_experts") or text.get("num_experts") or 1)
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    embed = int(text["vocab_size"]) * hidden * (1 if tied else 2)
    per_layer = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * inter * experts
    params = embed + layers * per_layer
    width = _DTYPE_BYTES.get(str(dtype), 4)
    kv = kv_tokens * layers * 2 * kv_heads * head_dim * width
    return (
        params * width + kv,
        f"~{params / 1e9:.2f}B parameters in {dtype} and a KV cache of {kv / 2**30:.2f} GiB",
    )
