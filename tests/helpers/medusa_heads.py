"""Random Medusa heads in TGI's layout (`medusa_lm_head.safetensors` and `config.json`) beside a tiny random
Llama (`tgi.core.testing.model.write_tiny_llama`: hidden 64, vocabulary 256)."""

from __future__ import annotations

import json

import torch

HEADS, HIDDEN, VOCAB = 3, 64, 256


def write_medusa(folder, base, own_projection: bool) -> dict[str, torch.Tensor]:
    """Random heads (one residual block each; head 1 without its own projection when `own_projection`
    is False, so it uses the model's LM head) beside `base`, as TGI reads them."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(1)
    tensors = {}
    for i in range(HEADS):
        tensors[f"{i}.0.linear.weight"] = torch.randn(HIDDEN, HIDDEN, generator=gen) * 0.2
        tensors[f"{i}.0.linear.bias"] = torch.randn(HIDDEN, generator=gen) * 0.1
        if own_projection or i != 1:
            tensors[f"{i}.1.weight"] = torch.randn(VOCAB, HIDDEN, generator=gen) * 0.3
    folder.mkdir()
    save_file(tensors, str(folder / "medusa_lm_head.safetensors"))
    config = {"medusa_num_heads": HEADS, "medusa_num_layers": 1, "base_model_name_or_path": str(base)}
    (folder / "config.json").write_text(json.dumps(config))
    return tensors
