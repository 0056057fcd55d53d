"""The default model (a GGUF file) exported as a Hugging Face safetensors checkpoint, for tests and
benchmarks that need a dense checkpoint of a trained model (`--quantize eetq` / `fp8` at load time)."""

from __future__ import annotations

from pathlib import Path


def export_default_model(folder: str | Path, dtype: str = "bfloat16") -> Path:
    """Write the default model's weights (dequantized from its GGUF blocks by tgi's GGUF loader, with
    Hugging Face names and layout), config.json and tokenizer (transformers' reading of the GGUF) to
    `folder` as safetensors in `dtype`; return the folder (reused when already written)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    from tgi.core.loading import iter_weights, load_config, resolve_model

    folder = Path(folder)
    if (folder / "model.safetensors").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    source = resolve_model(None)
    config = load_config(source)
    tensors = {name: t.to(getattr(torch, dtype)).contiguous() for name, t in iter_weights(source, config)}
    config.dtype = dtype
    config.save_pretrained(folder)
    gguf = Path(source.path)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(folder)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def linear_weight_bytes(model, skip: tuple[str, ...] = ("lm_head",)) -> int:
    """Bytes the linear layers' weights take: dense weights (not meta placeholders) and the tensors their
    attached kernels hold (packed weights, scales), each storage counted once; modules named in `skip`
    (the output head, tied to the embeddings and never quantized) are left out."""
    import torch

    seen: set[int] = set()
    total = 0

    def count(t: torch.Tensor) -> None:
        nonlocal total
        if t.is_meta:
            return
        if t.layout != torch.strided or t.is_mkldnn:  # oneDNN's packed weights: no storage to share
            key, size = id(t), t.numel() * t.element_size()
        else:
            key, size = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
        if key not in seen:
            seen.add(key)
            total += size

    for name, module in model.named_modules():
        if not hasattr(type(module), "linear_kernel") or name in skip:
            continue
        count(module.weight)
        kernel = module.linear_kernel
        for obj in (kernel, getattr(kernel, "quantized", None)):
            for value in vars(obj).values() if obj is not None and hasattr(obj, "__dict__") else ():
                if isinstance(value, torch.Tensor):
                    count(value)
    return total
