"""Medusa checkpoints in TGI's layout, recognised without torch (see `tgi.core.speculative.medusa`)."""

from __future__ import annotations

import json
import os

HEADS_FILE = "medusa_lm_head.safetensors"


def is_medusa_folder(folder: str) -> bool:
    config = os.path.join(folder, "config.json")
    if not (os.path.isfile(config) and os.path.isfile(os.path.join(folder, HEADS_FILE))):
        return False
    with open(config) as f:
        return "medusa_num_heads" in json.load(f)


def read_medusa_config(folder: str) -> dict:
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    for key in ("medusa_num_heads", "medusa_num_layers", "base_model_name_or_path"):
        if key not in config:
            raise ValueError(f"{folder}/config.json: a Medusa checkpoint needs `{key}`")
    return config
