"""Medusa heads (Cai et al., 2024) in TGI's checkpoint layout: extra heads on the model's last hidden state,
head i guessing the token i + 2 places ahead (the model's own head gives the next one).

Layout (as TGI reads it): a folder with `config.json` holding `medusa_num_heads`, `medusa_num_layers` and
`base_model_name_or_path` (the model the heads belong to), and `medusa_lm_head.safetensors` holding, for
head i, residual blocks `{i}.{j}.linear.weight/bias` (j < medusa_num_layers: x + SiLU(W x + b)) and the
vocabulary projection `{i}.{medusa_num_layers}.weight`; a head without its own projection uses the model's
LM head.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from tgi.core.speculative.medusa_files import HEADS_FILE, read_medusa_config


class MedusaHeads(nn.Module):
    """`forward(hidden [N, H]) -> [N, heads, V]` logits of every head."""

    def __init__(self, folder: str, hidden_size: int, lm_head: nn.Module, dtype, device) -> None:
        super().__init__()
        from safetensors.torch import load_file

        config = read_medusa_config(folder)
        self.num_heads, num_layers = int(config["medusa_num_heads"]), int(config["medusa_num_layers"])
        tensors = load_file(os.path.join(folder, HEADS_FILE), device="cpu")
        self.blocks = nn.ModuleList()
        self.out = nn.ModuleList()
        self.lm_head = lm_head
        for i in range(self.num_heads):
            layers = nn.ModuleList()
            for j in range(num_layers):
                linear = nn.Linear(hidden_size, hidden_size, bias=True, dtype=dtype, device=device)
                linear.weight.data.copy_(tensors.pop(f"{i}.{j}.linear.weight"))
                linear.bias.data.copy_(tensors.pop(f"{i}.{j}.linear.bias"))
                layers.append(linear)
            self.blocks.append(layers)
            own = tensors.pop(f"{i}.{num_layers}.weight", None)
            if own is None:
                self.out.append(None)
            else:
                proj = nn.Linear(hidden_size, own.shape[0], bias=False, dtype=dtype, device=device)
                proj.weight.data.copy_(own)
                self.out.append(proj)
        if tensors:
            raise ValueError(f"{folder}/{HEADS_FILE}: unexpected tensors {sorted(tensors)[:5]}")

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        outs = []
        for layers, proj in zip(self.blocks, self.out, strict=True):
            x = hidden
            for linear in layers:
                x = x + nn.functional.silu(linear(x))
            outs.append((proj or self.lm_head)(x).float())
        return torch.stack(outs, dim=1)
