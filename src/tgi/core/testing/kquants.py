"""A reference quantizer for GGUF's K-quants (Q4_K, Q5_K, Q6_K) in plain numpy, for tests and benchmarks:
the `gguf` package dequantizes these formats but cannot quantize them.

It writes llama.cpp's super-block layouts (ggml's block_q4_K / block_q5_K / block_q6_K, 256 weights each),
so `gguf.quants.dequantize` reads what it writes. The choice of scales is the plain one (each sub-block's
range split evenly; the scales quantized against their super-block's largest), not llama.cpp's search for
the scales of least error: files made here are valid K-quant files, a little less accurate than
llama-quantize's.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FALLBACKS", "K_QUANTS", "MIXES", "k_quant_type", "quantize_k", "write_k_quant_gguf"]

QK_K = 256
#: bytes per super-block of each format
K_QUANTS = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}


def _f16(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16)


def _divide(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """x / scale, 0 where scale is 0."""
    safe = np.where(scale == 0, 1.0, scale)
    return np.where(scale == 0, 0.0, x / safe)


def _scale_min_bytes(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins per super-block [n, 8] -> llama.cpp's 12 bytes [n, 12]: sub-blocks 0-3 in
    the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 in the nibbles of bytes 8-11, their top 2 bits
    in the top bits of bytes 0-7."""
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    return out


def _quantize_q4_q5(x: np.ndarray, bits: int) -> np.ndarray:
    """x [n, 256] float32 -> Q4_K (bits 4) or Q5_K (bits 5) super-blocks [n, 144 or 176] uint8."""
    n = x.shape[0]
    levels = (1 << bits) - 1
    sub = x.reshape(n, 8, 32).astype(np.float64)
    low = np.minimum(sub.min(axis=-1), 0.0)  # w = scale * q - min with min >= 0
    high = np.maximum(sub.max(axis=-1), low)
    scale, minimum = (high - low) / levels, -low
    d = _f16(scale.max(axis=-1) / 63).astype(np.float64)
    dmin = _f16(minimum.max(axis=-1) / 63).astype(np.float64)
    sc = np.clip(np.rint(_divide(scale, d[:, None])), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(_divide(minimum, dmin[:, None])), 0, 63).astype(np.uint8)
    eff_scale, eff_min = d[:, None] * sc, dmin[:, None] * m
    q = np.clip(np.rint(_divide(sub + eff_min[..., None], eff_scale[..., None])), 0, levels).astype(np.uint8)
    head = [
        _f16(d).view(np.uint8).reshape(n, 2),
        _f16(dmin).view(np.uint8).reshape(n, 2),
        _scale_min_bytes(sc, m),
    ]
    if bits == 5:  # bit j of byte l: the fifth bit of weight l of sub-block j
        fifth = (q >> 4) & 1
        head.append((fifth << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1).astype(np.uint8))
    low4 = q & 0x0F  # byte 32 p + l: sub-block 2p's weight l (low nibble), 2p + 1's (high nibble)
    qs = (low4[:, 0::2, :] | (low4[:, 1::2, :] << 4)).reshape(n, 128)
    return np.concatenate([*head, qs], axis=1)


def _quantize_q6(x: np.ndarray) -> np.ndarray:
    """x [n, 256] float32 -> Q6_K super-blocks [n, 210] uint8 (sixteen sub-blocks of 16, int8 scales)."""
    n = x.shape[0]
    sub = x.reshape(n, 16, 16).astype(np.float64)
    at = np.abs(sub).argmax(axis=-1)
    peak = np.take_along_axis(sub, at[..., None], axis=-1)[..., 0]  # the signed value of largest magnitude
    scale = peak / -32.0  # peak maps to q - 32 = -32, the end of the range with room
    d = _f16(np.abs(scale).max(axis=-1) / 127).astype(np.float64)
    sc = np.clip(np.rint(_divide(scale, d[:, None])), -127, 127).astype(np.int8)
    eff = d[:, None] * sc
    q = (np.clip(np.rint(_divide(sub, eff[..., None])), -32, 31) + 32).astype(np.uint8).reshape(n, QK_K)
    halves = q.reshape(n, 2, 128)  # weights 128 h + ...
    ql = (halves[:, :, :64] & 0x0F) | ((halves[:, :, 64:] & 0x0F) << 4)  # byte 64 h + i
    top = (halves >> 4).reshape(n, 2, 4, 32)  # weight 128 h + 32 u + l -> bits 2u of byte 32 h + l
    qh = (top << (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]).sum(axis=2).astype(np.uint8)
    return np.concatenate(
        [ql.reshape(n, 128), qh.reshape(n, 64), sc.view(np.uint8), _f16(d).view(np.uint8).reshape(n, 2)],
        axis=1,
    )


def quantize_k(weight: np.ndarray, qtype: str) -> np.ndarray:
    """A [rows, cols] float weight (cols a multiple of 256) as `qtype` super-blocks: uint8
    [rows, cols / 256 * K_QUANTS[qtype]], row-major as GGUF stores it."""
    if qtype not in K_QUANTS:
        raise ValueError(f"unknown K-quant {qtype!r} (known: {sorted(K_QUANTS)})")
    weight = np.asarray(weight, dtype=np.float32)
    rows, cols = weight.shape
    if cols % QK_K:
        raise ValueError(f"K-quants need a width that is a multiple of {QK_K}, got {cols}")
    blocks = weight.reshape(-1, QK_K)
    if qtype == "Q6_K":
        out = _quantize_q6(blocks)
    else:
        out = _quantize_q4_q5(blocks, 4 if qtype == "Q4_K" else 5)
    return np.ascontiguousarray(out.reshape(rows, cols // QK_K * K_QUANTS[qtype]))


def _use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's choice of the layers whose attn_v and ffn_down get more bits in its _M mixes: the first
    and last eighth, and every third layer between."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


#: the K-quant mixes `write_k_quant_gguf` makes: (most weights, the weights given more bits)
MIXES = {"Q4_K_M": ("Q4_K", "Q6_K"), "Q5_K_M": ("Q5_K", "Q6_K")}
#: what llama.cpp stores in place of a K-quant for a width that is no multiple of 256
FALLBACKS = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def k_quant_type(name: str, cols: int, layers: int, mix: str) -> str:
    """The type the `mix` gives the 2-D GGUF tensor `name` of width `cols`, as llama.cpp's mixes do:
    attn_v and ffn_down of `_use_more_bits` layers and the token embeddings / output Q6_K, the rest the
    mix's type; where the width is no multiple of 256, llama.cpp's fallback (`FALLBACKS`)."""
    base, more = MIXES[mix]
    parts = name.split(".")
    if name in ("token_embd.weight", "output.weight"):
        qtype = more
    elif len(parts) == 4 and parts[0] == "blk" and parts[2] in ("attn_v", "ffn_down"):
        qtype = more if _use_more_bits(int(parts[1]), layers) else base
    else:
        qtype = base
    return FALLBACKS[qtype] if cols % QK_K else qtype


def write_k_quant_gguf(src: str, dst: str, mix: str = "Q4_K_M") -> dict[str, str]:
    """Write `dst`: the GGUF file `src` with its 2-D weights requantized (from `gguf`'s dequantization)
    into the K-quant `mix` (see `k_quant_type`: K-quants by `quantize_k`, their fallbacks by `gguf`'s
    quantizer); 1-D tensors are copied as stored. Same metadata (general.file_type set to the mix).
    Returns {tensor: type}."""
    import gguf
    from gguf.quants import dequantize, quantize

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    layers = int(reader.fields[f"{arch}.block_count"].contents())
    writer = gguf.GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(getattr(gguf.LlamaFileType, f"MOSTLY_{mix}"))
    types = {}
    for tensor in reader.tensors:
        qtype = tensor.tensor_type
        if len(tensor.shape) != 2:
            data = np.array(tensor.data)
        else:
            rows, cols = int(tensor.shape[1]), int(tensor.shape[0])
            target = k_quant_type(tensor.name, cols, layers, mix)
            dense = np.asarray(dequantize(tensor.data, qtype), dtype=np.float32).reshape(rows, cols)
            qtype = gguf.GGMLQuantizationType[target]
            data = quantize_k(dense, target) if target in K_QUANTS else quantize(dense, qtype)
        raw = None if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16) else qtype
        writer.add_tensor(tensor.name, data, raw_dtype=raw)
        types[tensor.name] = qtype.name
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return types
