"""A 1B-class Llama with random weights, written as GGUF (bf16, Q8_0, Q4_1 or a Q4_K_M mix), to measure
loading and serving at the size users serve on CPUs without a model hub.

Shapes are Llama-3.2-1B's (hidden 2048, intermediate 8192, 16 layers, 32 heads, 8 KV heads, head_dim 64,
tied embeddings, rope_theta 500000; `--size 8b`: Llama-3.1-8B's); the vocabulary and tokenizer are the default model's (49,152 tokens,
copied from its GGUF's `tokenizer.*` metadata): ~1.07B parameters. Speed does not depend on the values,
so they are drawn with a fixed seed (Gaussian, std 0.02; norms ones). K-quants come from tgi's reference
quantizer (`tgi.core.testing.kquants`), the other block types from `gguf`'s.

    python -m tgi.benchmarks.make_model --out /root/models --types bf16 Q8_0 Q4_K_M
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from dataclasses import dataclass

import numpy as np

#: block types this module writes: "bf16", gguf's quantizer's "Q8_0" / "Q4_0" / "Q4_1", and the K-quant mix
TYPES = ("bf16", "Q8_0", "Q4_0", "Q4_1", "Q4_K_M")


@dataclass(frozen=True)
class ModelShape:
    """A Llama's shapes (GGUF metadata and tensor shapes follow from them)."""

    hidden: int = 2048
    intermediate: int = 8192
    layers: int = 16
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 64
    vocab: int = 49152
    rope_theta: float = 500000.0
    context: int = 8192
    tied: bool = True  # the output head is the token embeddings (no output.weight)


#: Llama-3.2-1B's shapes with the default model's vocabulary
LLAMA_1B = ModelShape()
#: Llama-3.1-8B's shapes (untied head; without its llama3 RoPE scaling) with the default model's vocabulary
LLAMA_8B = ModelShape(hidden=4096, intermediate=14336, layers=32, head_dim=128, tied=False)
#: shapes named on the command line (`--size`, `--model-shape`)
SIZES = {"1b": LLAMA_1B, "8b": LLAMA_8B}


def tensor_shapes(shape: ModelShape) -> dict[str, tuple[int, ...]]:
    """GGUF tensor name -> Hugging Face-order shape ([rows, cols] for matrices); output.weight only where
    the shape's head is not tied to the embeddings."""
    h, kv = shape.hidden, shape.kv_heads * shape.head_dim
    out = {"token_embd.weight": (shape.vocab, h), "output_norm.weight": (h,)}
    if not shape.tied:
        out["output.weight"] = (shape.vocab, h)
    for i in range(shape.layers):
        out |= {
            f"blk.{i}.attn_norm.weight": (h,),
            f"blk.{i}.attn_q.weight": (shape.heads * shape.head_dim, h),
            f"blk.{i}.attn_k.weight": (kv, h),
            f"blk.{i}.attn_v.weight": (kv, h),
            f"blk.{i}.attn_output.weight": (h, shape.heads * shape.head_dim),
            f"blk.{i}.ffn_gate.weight": (shape.intermediate, h),
            f"blk.{i}.ffn_up.weight": (shape.intermediate, h),
            f"blk.{i}.ffn_down.weight": (h, shape.intermediate),
            f"blk.{i}.ffn_norm.weight": (h,),
        }
    return out


def random_tensors(shape: ModelShape, seed: int = 0):
    """(GGUF name, float32 array in Hugging Face order) for every tensor of `tensor_shapes`, one at a time:
    matrices Gaussian with std 0.02 drawn in that order from one seeded generator, norms ones. Both
    writers (this module's GGUF, `hf_random_model`'s safetensors) take the values from here."""
    rng = np.random.default_rng(seed)
    for name, dims in tensor_shapes(shape).items():
        if len(dims) == 1:
            yield name, np.ones(dims, dtype=np.float32)
        else:
            yield name, rng.standard_normal(dims, dtype=np.float32) * np.float32(0.02)


def _tensor_type(name: str, cols: int, layers: int, kind: str) -> str:
    if kind == "Q4_K_M":
        from tgi.core.testing.kquants import k_quant_type

        return k_quant_type(name, cols, layers, "Q4_K_M")
    return "BF16" if kind == "bf16" else kind


def _encode(weight: np.ndarray, qtype: str):
    """`weight` float32 [rows, cols] -> (data, raw_dtype) as `GGUFWriter.add_tensor` takes them."""
    import gguf
    from gguf.quants import quantize

    from tgi.core.testing.kquants import K_QUANTS, quantize_k

    gtype = gguf.GGMLQuantizationType[qtype]
    if qtype in K_QUANTS:
        return quantize_k(weight, qtype), gtype
    return quantize(weight, gtype), gtype


@functools.lru_cache(maxsize=2)
def _tokenizer_fields(path: str, size: int, mtime_ns: int) -> dict[str, tuple]:
    """The `tokenizer.*` metadata of the GGUF at `path`: key -> (contents, value type, array item type), in
    the file's order. gguf's reader takes seconds on a 49k-token vocabulary: read once per process for each
    version of the file (`size`, `mtime_ns`), where several formats are written one after another."""
    import gguf

    fields = {}
    for key, field in gguf.GGUFReader(path).fields.items():
        if key.startswith("tokenizer."):
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            fields[key] = (field.contents(), vtype, sub)
    return fields


def write_gguf(path: str, kind: str, shape: ModelShape = LLAMA_1B, seed: int = 0) -> str:
    """Write the model with 2-D weights in `kind` (one of `TYPES`) to `path`; returns `path`. Tokenizer
    metadata comes from the default model's GGUF (its vocabulary size must equal `shape.vocab`)."""
    import gguf

    from tgi.core.loading.resolve import default_model_path

    if kind not in TYPES:
        raise ValueError(f"unknown weight type {kind!r} (known: {', '.join(TYPES)})")
    source = default_model_path()
    stat = os.stat(source)
    fields = _tokenizer_fields(source, stat.st_size, stat.st_mtime_ns)
    tokens = len(fields["tokenizer.ggml.tokens"][0])
    if tokens != shape.vocab:
        raise ValueError(
            f"the default model's tokenizer has {tokens} tokens, the shape asks for {shape.vocab}"
        )
    writer = gguf.GGUFWriter(path, "llama")
    for key, (contents, vtype, sub) in fields.items():
        writer.add_key_value(key, contents, vtype, sub_type=sub)
    writer.add_name(f"tgi-random-llama-{shape.layers}l-{shape.hidden}")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.intermediate)
    writer.add_block_count(shape.layers)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(1e-5)
    for name, weight in random_tensors(shape, seed):
        if weight.ndim == 1:
            writer.add_tensor(name, weight)
            continue
        data, raw = _encode(weight, _tensor_type(name, weight.shape[1], shape.layers, kind))
        writer.add_tensor(name, data, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def model_path(folder: str, kind: str, size: str = "1b") -> str:
    """Where `make` puts the file of `kind` in `folder`."""
    return os.path.join(folder, f"tgi-llama-{size}-random.{kind}.gguf")


def make(folder: str, kinds: list[str], size: str = "1b", force: bool = False) -> list[str]:
    """Write the model of `size` in each of `kinds` into `folder` (kept when already there, unless
    `force`); returns the paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for kind in kinds:
        path = model_path(folder, kind, size)
        if force or not os.path.exists(path):
            start = time.perf_counter()
            write_gguf(path + ".partial", kind, SIZES[size])
            os.replace(path + ".partial", path)
            print(f"wrote {path} ({os.path.getsize(path) / 1e9:.2f} GB, {time.perf_counter() - start:.0f} s)")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="folder to write the files into")
    parser.add_argument("--size", choices=sorted(SIZES), default="1b")
    parser.add_argument("--types", nargs="+", choices=TYPES, default=["Q4_K_M"])
    parser.add_argument("--force", action="store_true", help="rewrite files that exist")
    args = parser.parse_args(argv)
    make(args.out, args.types, args.size, args.force)


if __name__ == "__main__":
    main()
