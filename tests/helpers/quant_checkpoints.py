"""Quantized checkpoints of the conformance suite's tiny Llama, made in the test with the plain-torch
reference quantizers and packers of `tests/helpers/quant_formats.py` (independent of tgi's kernels and unpackers),
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
    if fmt == "marlin":
        qz = quantize_int(w, 4, opts["group_size"], sym=True)  # zero points 8
        group = w.shape[1] if opts["group_size"] == -1 else opts["group_size"]
        b, s = pack_marlin(qz.q, qz.scales, group)
        scales = qz.scales.half().float()
        g = qz.g_idx.long()
        return {"B": b, "s": s}, ((qz.q - 8).float() * scales[g]).T.contiguous()
    if fmt == "fp8":
        q, scale = quantize_fp8(w, opts["per_channel"])
        return {
            "weight": q,
            "weight_scale": scale.reshape(-1, 1) if opts["per_channel"] else scale.reshape(1),
        }, (q.float() * scale)
    raise ValueError(fmt)


def _marlin_order() -> list[int]:
    """Marlin's storage order of 4 16x16 tiles (1024 values), from its published description: thread t of
    a warp holds, for each of the two 8-column halves of a tile, rows 2(t%4), 2(t%4)+1, 2(t%4)+8,
    2(t%4)+9 of column t//4; the 4 tiles follow each other; within each 8 values the nibbles are stored in
    the order 0, 2, 4, 6, 1, 3, 5, 7."""
    order = []
    for t in range(32):
        eight = []
        for half in range(2):
            r = 2 * (t % 4)
            for row in (r, r + 1, r + 8, r + 9):
                eight.append(row * 16 + t // 4 + 8 * half)
        for tile in range(4):
            order.extend(v + 256 * tile for v in eight)
    out = []
    for w in range(0, len(order), 8):
        out.extend(order[w + i] for i in (0, 2, 4, 6, 1, 3, 5, 7))
    return out


def pack_marlin(q: torch.Tensor, scales: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B int32 [K / 16, N * 2], s float16 [G, N]) of 4-bit codes q [K, N] (zero point 8), element by
    element: 16x16 tiles row-major side by side, each 1024 values reordered, 8 nibbles per word lowest
    first; scales reordered within 64 columns (grouped) or 32 (one group per row)."""
    k, n = q.shape
    tiles = q.reshape(k // 16, 16, n // 16, 16).permute(0, 2, 1, 3).reshape(k // 16, n * 16)
    order = _marlin_order()
    stored = torch.empty_like(tiles)
    for block in range(tiles.shape[1] // 1024):
        for pos, src in enumerate(order):
            stored[:, block * 1024 + pos] = tiles[:, block * 1024 + src]
    words = torch.zeros(k // 16, n * 2, dtype=torch.int64)
    for c in range(stored.shape[1]):
        words[:, c // 8] |= stored[:, c].long() << (4 * (c % 8))
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    if group_size < k:
        perm = [i + 8 * j for i in range(8) for j in range(8)]
    else:
        perm = [2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)]
    flat = scales.half().reshape(-1, len(perm))
    s = torch.stack([flat[:, p] for p in perm], dim=1).reshape(-1, n)
    return words, s


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
    if fmt == "marlin":
        return {"quant_method": "gptq", "bits": 4, "group_size": opts["group_size"], "sym": True,
                "desc_act": False, "checkpoint_format": "marlin"}  # fmt: skip
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
