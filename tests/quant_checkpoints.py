"""Quantized checkpoints of the conformance suite's tiny Llama, made in the test with the plain-torch
reference quantizers and packers of `tests/quant_formats.py` (independent of tgi's kernels and unpackers),
each beside a dense float32 checkpoint of its dequantized weights (the reference its logits must equal).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from quant_formats import pack_awq, pack_gptq, quantize_fp8, quantize_int, quantize_int8
from safetensors.torch import load_file, save_file

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _is_linear(name: str) -> bool:
    return name.endswith(".weight") and name.split(".")[-2] in LINEARS


def _copy_folder(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, dst / f.name)


def _quantize_one(w: torch.Tensor, fmt: str, opts: dict) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(the checkpoint tensors of one linear by suffix, its dequantized float32 weight [N, K])."""
    if fmt in ("gptq", "awq"):
        qz = quantize_int(
            w,
            opts.get("bits", 4),
            opts["group_size"],
            sym=opts.get("sym", True),
            desc_act=opts.get("desc_act", False),
        )
        if fmt == "gptq":
            qweight, qzeros = pack_gptq(qz, v1=opts.get("v1", True))
            tensors = {"qweight": qweight, "qzeros": qzeros, "g_idx": qz.g_idx}
        else:
            qweight, qzeros = pack_awq(qz)
            tensors = {"qweight": qweight, "qzeros": qzeros}
        tensors["scales"] = qz.scales.half()
        scales = qz.scales.half().float()  # as stored: the dequantized reference uses the float16 scales
        g = qz.g_idx.long()
        return tensors, ((qz.q - qz.zeros[g]).float() * scales[g]).T.contiguous()
    if fmt == "fp8":
        q, scale = quantize_fp8(w, opts["per_channel"])
        return {
            "weight": q,
            "weight_scale": scale.reshape(-1, 1) if opts["per_channel"] else scale.reshape(1),
        }, (q.float() * scale)
    raise ValueError(fmt)


def quantization_config(fmt: str, opts: dict) -> dict:
    if fmt == "gptq":
        return {
            "quant_method": "gptq",
            "bits": opts["bits"],
            "group_size": opts["group_size"],
            "desc_act": opts.get("desc_act", False),
            "sym": opts.get("sym", True),
            "checkpoint_format": "gptq" if opts.get("v1", True) else "gptq_v2",
        }
    if fmt == "awq":
        return {
            "quant_method": "awq",
            "bits": 4,
            "group_size": opts["group_size"],
            "version": "gemm",
            "zero_point": True,
        }
    strategy = "channel" if opts["per_channel"] else "tensor"
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True},
                "input_activations": None,
            }
        },
        "ignore": ["lm_head"],
    }


def write_quantized(dense: Path, out: Path, fmt: str, **opts) -> tuple[Path, Path]:
    """(a `fmt` checkpoint of `dense`'s linears, a dense float32 checkpoint of its dequantized weights)."""
    tensors = load_file(dense / "model.safetensors")
    quant, ref = {}, {}
    for name, t in tensors.items():
        if not _is_linear(name):
            quant[name] = ref[name] = t
            continue
        parts, deq = _quantize_one(t.float(), fmt, opts)
        prefix = name.removesuffix(".weight")
        quant.update({f"{prefix}.{k}": v.contiguous() for k, v in parts.items()})
        ref[name] = deq
    qdir, rdir = out / "quantized", out / "reference"
    for folder, data in ((qdir, quant), (rdir, ref)):
        _copy_folder(dense, folder)
        save_file(data, str(folder / "model.safetensors"))
    config = json.loads((dense / "config.json").read_text())
    config["quantization_config"] = quantization_config(fmt, opts)
    (qdir / "config.json").write_text(json.dumps(config))
    return qdir, rdir


def write_dequantized_int8(dense: Path, out: Path, fp8: bool = False) -> Path:
    """A dense checkpoint of `dense` with every decoder linear replaced by its per-row int8 (EETQ) or fp8
    (`--quantize fp8`) round trip: the reference of load-time quantization."""
    tensors = load_file(dense / "model.safetensors")
    for name, t in list(tensors.items()):
        if _is_linear(name):
            if fp8:
                q, scale = quantize_fp8(t.float(), per_channel=True)
            else:
                q, scale = quantize_int8(t.float())
            tensors[name] = q.float() * scale
    _copy_folder(dense, out)
    save_file(tensors, str(out / "model.safetensors"))
    return out
