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

    from tgi.core.loading import iter_weights, load_config, resolve_model
    from tgi.core.tokenization import load_tokenizer

    folder = Path(folder)
    if (folder / "model.safetensors").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    source = resolve_model(None)
    config = load_config(source)
    tensors = {name: t.to(getattr(torch, dtype)).contiguous() for name, t in iter_weights(source, config)}
    config.dtype = dtype
    config.save_pretrained(folder)
    load_tokenizer(source).save_pretrained(folder)  # transformers' reading of the GGUF, cached per machine
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


def _pack_along_rows(codes, bits: int):
    """int [R, C] codes in [0, 2^bits) -> int32 [R * bits / 32, C], consecutive rows in one word."""
    import torch

    per = 32 // bits
    words = codes.to(torch.int64).reshape(-1, per, codes.shape[1])
    shifts = torch.arange(0, 32, bits, dtype=torch.int64)[None, :, None]
    packed = (words << shifts).sum(dim=1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def export_gptq(dense: str | Path, folder: str | Path, bits: int = 4, group_size: int = 128) -> Path:
    """A GPTQ checkpoint ("gptq" v1 format, symmetric, no act-order) of a dense safetensors checkpoint's
    decoder linears, quantized round-to-nearest (GPTQ's storage without its error feedback: for
    benchmarks, where the layout and kernel matter, not the accuracy); reused when already written."""
    import json
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    dense, folder = Path(dense), Path(folder)
    if (folder / "model.safetensors").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    maxq, mid = 2**bits - 1, 2 ** (bits - 1)
    out = {}
    for name, w in load_file(dense / "model.safetensors").items():
        parts = name.split(".")
        if not (
            name.endswith(".weight") and parts[-2].endswith("_proj") and parts[-3] in ("self_attn", "mlp")
        ):
            out[name] = w
            continue
        n, k = w.shape
        groups = w.float().reshape(n, k // group_size, group_size)
        scales = (groups.abs().amax(-1) * 2 / maxq).clamp(min=1e-8)  # [n, G]
        q = torch.round(groups / scales[..., None] + mid).clamp(0, maxq).reshape(n, k).to(torch.int32)
        prefix = name.removesuffix(".weight")
        out[f"{prefix}.qweight"] = _pack_along_rows(q.T.contiguous(), bits)
        zeros = torch.full((k // group_size, n), mid - 1, dtype=torch.int32)  # v1: zero minus one
        out[f"{prefix}.qzeros"] = _pack_along_rows(zeros.T.contiguous(), bits).T.contiguous()
        out[f"{prefix}.scales"] = scales.T.contiguous().half()
        out[f"{prefix}.g_idx"] = (torch.arange(k) // group_size).to(torch.int32)
    for f in dense.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, folder / f.name)
    config = json.loads((dense / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "gptq", "bits": bits, "group_size": group_size, "desc_act": False, "sym": True,
        "checkpoint_format": "gptq",
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file(out, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder
