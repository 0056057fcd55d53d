"""The benchmark's random-weight Llama (`make_model`'s shapes and values) as a Hugging Face folder: config.json,
the default model's tokenizer (transformers' reading of its GGUF), and bfloat16 safetensors, one file per
layer (plus one for the embeddings, final norm and untied head) with `model.safetensors.index.json`, so that
no more than one layer is ever in memory (an 8B-class model is 16 GB in bfloat16).

The folder is what llama.cpp's `convert_hf_to_gguf.py` reads, and what our server loads as dense weights.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tgi.benchmarks.make_model import ModelShape, random_tensors


def hf_name(gguf_name: str) -> tuple[str, str]:
    """GGUF tensor name -> (Hugging Face name, as the GGUF loader maps it; the shard it goes to)."""
    # imported here: the loader imports torch and transformers, which `tgi --help` and every `tgi` command's
    # parser (this module is imported to build `tgi benchmark`'s) must not wait for
    from tgi.core.loading.gguf_loader import hf_tensor_name

    name = hf_tensor_name(gguf_name)
    if name is None:
        raise ValueError(f"{gguf_name!r} is no model parameter")
    if gguf_name.startswith("blk."):
        return name, f"model-layer-{int(gguf_name.split('.')[1]):03d}.safetensors"
    return name, "model-global.safetensors"


def write_hf_folder(folder: str | Path, shape: ModelShape, seed: int = 0) -> Path:
    """Write the model to `folder` (through `<folder>.partial`, renamed when complete); returns `folder`."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    from tgi.core.loading.resolve import default_model_path, resolve_model
    from tgi.core.tokenization import load_tokenizer

    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    tokenizer = load_tokenizer(
        resolve_model(default_model_path())
    )  # transformers' reading, cached per machine
    if len(tokenizer) != shape.vocab:
        raise ValueError(
            f"the default tokenizer has {len(tokenizer)} tokens, the shape asks for {shape.vocab}"
        )
    tokenizer.save_pretrained(partial)
    LlamaConfig(
        hidden_size=shape.hidden, intermediate_size=shape.intermediate, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
        tie_word_embeddings=shape.tied, rope_theta=shape.rope_theta, vocab_size=shape.vocab,
        max_position_embeddings=shape.context, rms_norm_eps=1e-5, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, dtype="bfloat16", architectures=["LlamaForCausalLM"],
    ).save_pretrained(partial)  # fmt: skip
    weight_map: dict[str, str] = {}
    shard: dict[str, torch.Tensor] = {}
    shard_file = None
    total = 0
    for gguf_name, values in random_tensors(shape, seed):
        name, file = hf_name(gguf_name)
        if file != shard_file and shard:
            save_file(shard, str(partial / shard_file), metadata={"format": "pt"})
            shard = {}
        shard_file = file
        shard[name] = torch.from_numpy(values).to(torch.bfloat16)
        weight_map[name] = file
        total += values.size * 2
    save_file(shard, str(partial / shard_file), metadata={"format": "pt"})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (partial / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
    return folder
