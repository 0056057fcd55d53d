"""A random-weight checkpoint with custom code, as the hub's `trust_remote_code` models ship it: config.json
whose `auto_map` points to `configuration_custom.py` / `modeling_custom.py` in the folder, a `model_type`
transformers does not know, safetensors weights and a word-level tokenizer. For tests of
`--trust-remote-code` (the transformers fallback runs the checkpoint's own model class).

The custom model is transformers' Llama under new names, with one change of its own that a plain Llama
would not make: its logits are multiplied by `final_logit_scale` (-1 by default, so greedy decoding picks
what Llama would pick last): tokens equal to the reference show that the checkpoint's code ran."""

from __future__ import annotations

import json
from pathlib import Path

MODEL_TYPE = "tgi_custom_llama"
ARCHITECTURE = "CustomLlamaForCausalLM"

CONFIGURATION = '''"""A config class of the checkpoint's own (loaded only with trust_remote_code)."""
from transformers import LlamaConfig


class CustomLlamaConfig(LlamaConfig):
    model_type = "tgi_custom_llama"

    def __init__(self, final_logit_scale=-1.0, **kwargs):
        self.final_logit_scale = final_logit_scale
        super().__init__(**kwargs)
'''

MODELING = '''"""A causal LM of the checkpoint's own: Llama, its logits scaled by `config.final_logit_scale`."""
from transformers import LlamaForCausalLM

from .configuration_custom import CustomLlamaConfig


class CustomLlamaForCausalLM(LlamaForCausalLM):
    config_class = CustomLlamaConfig

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits * self.config.final_logit_scale
        return out
'''


def save_remote_code_checkpoint(
    folder: Path | str,
    *,
    vocab_size: int = 256,
    hidden_size: int = 64,
    intermediate_size: int = 96,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    max_position_embeddings: int = 256,
    final_logit_scale: float = -1.0,
    init_std: float | None = 0.08,
    seed: int = 0,
) -> Path:
    """Write the custom-code checkpoint described in the module docstring to `folder` and return it."""
    from tgi.core.testing.tiny_models import save_random_model

    folder = save_random_model(
        folder, "llama", vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings, init_std=init_std, seed=seed,
    )  # fmt: skip
    (folder / "configuration_custom.py").write_text(CONFIGURATION)
    (folder / "modeling_custom.py").write_text(MODELING)
    path = folder / "config.json"
    data = json.loads(path.read_text())
    data.update(
        model_type=MODEL_TYPE,
        architectures=[ARCHITECTURE],
        final_logit_scale=final_logit_scale,
        auto_map={
            "AutoConfig": "configuration_custom.CustomLlamaConfig",
            "AutoModelForCausalLM": f"modeling_custom.{ARCHITECTURE}",
        },
    )
    path.write_text(json.dumps(data, indent=2))
    return folder
