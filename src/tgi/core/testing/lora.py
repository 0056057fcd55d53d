"""Random LoRA adapters made with `peft` on a checkpoint folder, for tests and benchmarks of `--lora-adapters`,
and the transformers + peft greedy reference they are compared with."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def load_base(base_model: str | Path):
    """transformers' float32 model of a checkpoint folder or a .gguf file (dequantized)."""
    import torch
    from transformers import AutoModelForCausalLM

    from tgi.core.testing.transformers_gguf import load_transformers_gguf

    path = Path(base_model)
    if path.suffix == ".gguf":
        return load_transformers_gguf(path)  # transformers' reading, cached per machine
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


#: every attention and MLP projection of a Llama-family decoder layer
LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def write_random_lora(
    folder: str | Path,
    base_model: str | Path | Any,
    *,
    r: int = 8,
    lora_alpha: int = 16,
    target_modules: Sequence[str] = LLAMA_TARGETS,
    use_rslora: bool = False,
    std: float = 0.1,
    seed: int = 0,
) -> Path:
    """Save a PEFT LoRA adapter for the model at `base_model` (a checkpoint folder or a .gguf file, or a
    transformers model already loaded with `load_base`, which is given back unchanged) to `folder`: A and B
    both drawn from N(0, std²) (PEFT starts B at zero, which would make the adapter a no-op)."""
    import torch
    from peft import LoraConfig, get_peft_model

    loaded = not isinstance(base_model, (str, Path))
    base = base_model if loaded else load_base(base_model)
    config = LoraConfig(
        r=r, lora_alpha=lora_alpha, target_modules=list(target_modules), use_rslora=use_rslora,
        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
    )  # fmt: skip
    model = get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * std)
    model.save_pretrained(str(folder))
    if loaded:
        model.unload()  # the caller's model without the LoRA layers PEFT injected
    return Path(folder)


def peft_greedy(
    base_model: str | Path | Any,
    adapter: str | Path | None,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
) -> list[list[int]]:
    """Greedy tokens of transformers' float32 model with the PEFT adapter at `adapter` (None: the base model),
    each prompt alone, the whole sequence run again for every token, EOS not stopping it. `base_model`: a
    checkpoint folder or a .gguf file, or a transformers model already loaded with `load_base`, which is
    given back unchanged (the adapter's layers removed again), so that one load serves several adapters."""
    import torch

    loaded = not isinstance(base_model, (str, Path))
    model = base_model if loaded else load_base(base_model)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    out = []
    try:
        with torch.no_grad():
            for prompt in prompts:
                ids = list(prompt)
                for _ in range(max_new_tokens):
                    logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
                    ids.append(int(logits.argmax()))
                out.append(ids[len(prompt) :])
    finally:
        if loaded and adapter is not None:
            model.unload()  # the caller's model without the LoRA layers PEFT injected
    return out
