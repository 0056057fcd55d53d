"""llama.cpp GGUF checkpoints: config from the GGUF metadata, weights dequantized to float32 (numpy arrays, or
torch tensors made from them).

Read with `tgi.core.loading.gguf_file.GGUFFile` (the header parsed from the memory map; tensors are views
of it) and `gguf.quants.dequantize`. llama.cpp tensor names are mapped to
Hugging Face parameter names, and the rotary row permutation that llama.cpp's converter applies to the Q/K
projections of llama-architecture models is undone, so the weights equal what
`AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)` loads (checked in tests/unit/core/loading/test_loading.py).

Supported architectures: llama (including Mistral models converted as llama) and qwen2.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from gguf.quants import dequantize
from transformers import LlamaConfig, MistralConfig, PretrainedConfig, Qwen2Config

from tgi.core.loading.gguf_file import GGUFFile
from tgi.core.loading.selection import SKIP, WeightSelector, selection
from tgi.core.models.registry import UnsupportedModelError

if TYPE_CHECKING:
    import torch

SUPPORTED_ARCHITECTURES = ("llama", "qwen2")

# llama.cpp names of the tensors of one block -> Hugging Face names (without "model.layers.N.").
_BLOCK_TENSORS = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
# Tensors of llama.cpp's own that are no model parameter (rope_freqs: llama3 rope factors, read into the config).
_IGNORED_TENSORS = {"rope_freqs.weight"}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")

#: a backend's dequantizer of one stored 2-D tensor: (raw bytes uint8 [rows, bytes per row] in Hugging Face
#: row order, GGML type name ("Q4_K", "BF16", ...), rows, cols) -> the dense torch weight [rows, cols] with the
#: values `gguf.quants.dequantize` gives (in the dtype the backend loads them in), or None for a type it does
#: not take (`gguf`'s numpy dequantization then serves that tensor)
GGUFDequantizer = Callable[[np.ndarray, str, int, int], "torch.Tensor | None"]


@functools.lru_cache(maxsize=2)
def _reader(path: str, size: int, mtime_ns: int) -> GGUFFile:
    return GGUFFile(path)


def open_reader(path: str) -> GGUFFile:
    """The memory-mapped header of `path` (`GGUFFile`), cached per file identity (path, size, mtime):
    `gguf_config`, `iter_gguf_weights` and `iter_gguf_blocks` of one load read it once."""
    st = os.stat(path)
    return _reader(os.path.abspath(path), st.st_size, st.st_mtime_ns)


def _field(reader: GGUFFile, key: str, default: Any = None) -> Any:
    return reader.metadata.get(key, default)


def hf_tensor_name(gguf_name: str) -> str | None:
    """The Hugging Face parameter name of a llama.cpp tensor name; None for tensors that are no parameter."""
    if gguf_name in _IGNORED_TENSORS:
        return None
    m = _BLOCK_RE.match(gguf_name)
    if m:
        layer, base, kind = m.groups()
        if base in _BLOCK_TENSORS:
            return f"model.layers.{layer}.{_BLOCK_TENSORS[base]}.{kind}"
    else:
        base, _, kind = gguf_name.rpartition(".")
        if base in _GLOBAL_TENSORS and kind in ("weight", "bias"):
            return f"{_GLOBAL_TENSORS[base]}.{kind}"
    raise ValueError(f"GGUF tensor {gguf_name!r} has no Hugging Face equivalent in tgi's GGUF loader")


def _llama3_rope(
    path: str, reader: GGUFFile, theta: float, head_dim: int, orig_ctx: int | None
) -> dict | None:
    """Recover Llama-3 rope scaling parameters from llama.cpp's `rope_freqs` tensor (None if absent).
    Raises `UnsupportedModelError` for a tensor whose factors are not Llama-3's."""
    tensor = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    if tensor is None:
        return None
    stored = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float64).reshape(-1)
    factor = round(float(stored.max()), 4)  # stored as float32
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    wavelen = 2 * math.pi / freqs
    for low, high, old_ctx in ((1.0, 4.0, orig_ctx or 8192), (1.0, 4.0, 8192)):
        low_wl, high_wl = old_ctx / low, old_ctx / high
        smooth = (old_ctx / wavelen - low) / (high - low)
        expect = np.where(
            wavelen < high_wl, 1.0, np.where(wavelen > low_wl, factor, 1 / ((1 - smooth) / factor + smooth))
        )
        if expect.shape == stored.shape and np.allclose(expect, stored, rtol=1e-3):
            return {
                "rope_type": "llama3",
                "rope_theta": theta,
                "factor": factor,
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": int(old_ctx),
            }
    raise UnsupportedModelError(
        f"{path}: the GGUF's rope_freqs tensor scales the rotary frequencies in a way tgi does not recognise "
        "(only llama3 rope scaling is read from rope_freqs); plain rope would compute other positions"
    )


# the `{arch}.rope.scaling.*` keys `_rope_parameters` reads ("finetuned" describes training, not the math),
# and the values of other keys that ask for nothing more
_ROPE_SCALING_READ = frozenset(
    {"type", "factor", "original_context_length", "yarn_beta_fast", "yarn_beta_slow", "finetuned"}
)
_NEUTRAL = {"attn_factor": (1.0,), "yarn_log_multiplier": (0.0,)}


def _rope_parameters(path: str, reader: GGUFFile, arch: str, theta: float, head_dim: int) -> dict:
    """The config's `rope_parameters`. Raises `UnsupportedModelError` for rope scaling tgi cannot
    reproduce, rather than computing plain rope in its place."""

    def get(key: str, default: Any = None) -> Any:
        return _field(reader, f"{arch}.rope.scaling.{key}", default)

    prefix = f"{arch}.rope.scaling."
    for key in reader.metadata:
        name = key[len(prefix) :]
        if (
            key.startswith(prefix)
            and name not in _ROPE_SCALING_READ
            and get(name) not in _NEUTRAL.get(name, ())
        ):
            raise UnsupportedModelError(
                f"{path}: GGUF rope scaling parameter {key} = {get(name)!r} is not supported (read: "
                f"{', '.join(sorted(_ROPE_SCALING_READ))}); ignoring it would compute other positions"
            )
    kind = get("type")
    factor = get("factor")
    orig = get("original_context_length")
    if kind in ("linear", "yarn") and factor not in (None, 1.0):
        params = {"rope_type": kind, "rope_theta": theta, "factor": float(factor)}
        if orig is not None:
            params["original_max_position_embeddings"] = int(orig)
        if kind == "yarn":
            for gguf_key, hf_key in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
                if (value := get(gguf_key)) is not None:
                    params[hf_key] = float(value)
        return params
    if kind not in (None, "none", "linear", "yarn"):
        raise UnsupportedModelError(
            f"{path}: GGUF rope scaling type {kind!r} is not supported (supported: linear, yarn, and llama3 "
            "given as a rope_freqs tensor)"
        )
    return _llama3_rope(path, reader, theta, head_dim, orig) or {"rope_type": "default", "rope_theta": theta}


def gguf_config(path: str) -> PretrainedConfig:
    """Build the transformers config (LlamaConfig / MistralConfig / Qwen2Config) from GGUF metadata."""
    import torch  # transformers' configs carry a torch dtype

    reader = open_reader(path)
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"{path}: GGUF architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    name = str(_field(reader, "general.name", "") or "")

    def get(key: str, default: Any = None) -> Any:
        return _field(reader, f"{arch}.{key}", default)

    def require(key: str) -> Any:
        value = get(key)
        if value is None:
            raise ValueError(f"{path}: GGUF metadata lacks {arch}.{key}")
        return value

    tensors = {t.name: t for t in reader.tensors}
    hidden = int(require("embedding_length"))
    heads = int(require("attention.head_count"))
    kv_heads = get("attention.head_count_kv", heads)
    if isinstance(kv_heads, list):  # per-layer counts (some converters write an array)
        if len(set(kv_heads)) != 1:
            raise ValueError(f"{path}: per-layer KV head counts {sorted(set(kv_heads))} are not supported")
        kv_heads = kv_heads[0]
    head_dim = int(get("attention.key_length") or get("rope.dimension_count") or hidden // heads)
    theta = float(get("rope.freq_base", 10000.0))
    if "token_embd.weight" in tensors:
        vocab = int(tensors["token_embd.weight"].shape[-1])  # GGUF dims are reversed: [hidden, vocab]
    else:
        vocab = len(reader.metadata["tokenizer.ggml.tokens"])

    kwargs: dict[str, Any] = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=int(require("feed_forward_length")),
        num_hidden_layers=int(require("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(kv_heads),
        max_position_embeddings=int(get("context_length", 2048)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
        rope_parameters=_rope_parameters(path, reader, arch, theta, head_dim),
        tie_word_embeddings="output.weight" not in tensors,
        dtype=torch.float32,  # dequantized weights are float32
    )
    for key, hf_key in (
        ("bos_token_id", "bos_token_id"),
        ("eos_token_id", "eos_token_id"),
        ("padding_token_id", "pad_token_id"),
    ):
        value = _field(reader, f"tokenizer.ggml.{key}")
        if value is not None:
            kwargs[hf_key] = int(value)

    if arch == "qwen2":
        config: PretrainedConfig = Qwen2Config(**kwargs)
        config.architectures = ["Qwen2ForCausalLM"]
    elif "mistral" in name.lower():
        # Mistral models converted by llama.cpp as llama; GGUF carries no sliding window (llama.cpp uses none).
        config = MistralConfig(head_dim=head_dim, sliding_window=None, **kwargs)
        config.architectures = ["MistralForCausalLM"]
    else:
        config = LlamaConfig(
            head_dim=head_dim, attention_bias="blk.0.attn_q.bias" in tensors, mlp_bias=False, **kwargs
        )
        config.architectures = ["LlamaForCausalLM"]
    config.dtype = torch.float32
    return config


def _unpermute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo convert_hf_to_gguf's `permute` of Q/K rows (weights or biases) for one projection."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _unpermute_projection(name: str, w: np.ndarray, config: PretrainedConfig) -> np.ndarray:
    """`w` with llama.cpp's Q/K row permutation undone when `name` is a q or k projection, else as is."""
    if ".self_attn.q_proj." in name:
        return _unpermute_rotary(w, config.num_attention_heads)
    if ".self_attn.k_proj." in name:
        return _unpermute_rotary(w, config.num_key_value_heads)
    return w


def _dequantized_array(tensor, name: str, config: PretrainedConfig, permuted: bool) -> np.ndarray:
    """One tensor dequantized by `gguf` to float32, in Hugging Face shape and row order."""
    data = dequantize(tensor.data, tensor.tensor_type)
    shape = tuple(int(d) for d in reversed(tensor.shape))  # GGUF lists dims innermost first
    w = np.asarray(data, dtype=np.float32).reshape(shape)
    return _unpermute_projection(name, w, config) if permuted else w


def iter_gguf_arrays(
    path: str, config: PretrainedConfig, select: WeightSelector | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """Yield `(hf_name, float32 numpy array)` for every model tensor of the GGUF file. An array may be a
    read-only view of the memory-mapped file (float32 tensors stored as such, not permuted): copy it to
    write to it.

    With `select`, skipped tensors are not dequantized; selected slices are cut after dequantizing (and after
    undoing the Q/K permutation), so they equal the same slice of the full Hugging Face tensor.
    """
    reader = open_reader(path)
    arch = _field(reader, "general.architecture")
    permuted = arch == "llama"  # llama.cpp permutes Q/K for llama (and Mistral-as-llama); not for qwen2
    for tensor, name, spec in _selected_tensors(reader, select):
        w = _dequantized_array(tensor, name, config, permuted)
        if spec is not None:
            w = w[spec]
        yield name, w


def _selected_tensors(reader, select: WeightSelector | None) -> Iterator[tuple[object, str, object]]:
    """(tensor, Hugging Face name, slice of it to keep or None for all) for each tensor of the file that has
    a Hugging Face name and that `select` does not skip."""
    for tensor in reader.tensors:
        name = hf_tensor_name(tensor.name)
        if name is None:
            continue
        spec = selection(select, name)
        if spec is not SKIP:
            yield tensor, name, spec


def iter_gguf_weights(
    path: str,
    config: PretrainedConfig,
    select: WeightSelector | None = None,
    dequantize: GGUFDequantizer | None = None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """`iter_gguf_arrays` as float32 CPU tensors (contiguous, writable: copied where the array is a view of
    the memory map or not contiguous).

    With `dequantize` (a backend's, see `GGUFDequantizer`), each 2-D tensor is handed to it once, as the
    file's bytes (rows un-permuted), and yielded as it returns it (its dtype: the same values, possibly
    rounded to the model's dtype); tensors it declines take `gguf`'s numpy path as above. `select` slices
    after dequantizing either way."""
    import torch

    if dequantize is None:
        for name, w in iter_gguf_arrays(path, config, select):
            if not (w.flags.writeable and w.flags.c_contiguous):
                w = np.array(w)  # a C-ordered, writable copy
            yield name, torch.from_numpy(w)
        return
    reader = open_reader(path)
    permuted = _field(reader, "general.architecture") == "llama"
    for tensor, name, spec in _selected_tensors(reader, select):
        w = None
        if len(tensor.shape) == 2:
            rows, cols = int(tensor.shape[1]), int(tensor.shape[0])
            raw = np.asarray(tensor.data).view(np.uint8).reshape(rows, -1)  # a view of the memory map
            if permuted:
                raw = _unpermute_projection(name, raw, config)
            w = dequantize(raw, tensor.tensor_type.name, rows, cols)
        if w is None:
            w = torch.from_numpy(np.array(_dequantized_array(tensor, name, config, permuted)))
        yield name, w if spec is None else w[spec].contiguous()


def gguf_stored_formats(path: str) -> dict[str, tuple[str, int, int]]:
    """Hugging Face name -> (GGUF type name, rows, cols) of the file's 2-D tensors, from its metadata alone
    (nothing dequantized)."""
    formats = {}
    for tensor in open_reader(path).tensors:
        name = hf_tensor_name(tensor.name)
        if name is not None and len(tensor.shape) == 2:
            formats[name] = (tensor.tensor_type.name, int(tensor.shape[1]), int(tensor.shape[0]))
    return formats


def iter_gguf_blocks(path: str, config: PretrainedConfig, qtypes: frozenset[str]):
    """Yield `(hf_name, qtype, data, rows, cols)` for the 2-D tensors stored in one of `qtypes`: `data` is
    uint8 [rows, bytes per row], rows in Hugging Face order (Q/K rows un-permuted like `iter_gguf_arrays`
    does; blocks run along the input dim, so a row permutation moves whole rows of blocks): a read-only view
    of the memory map, or for un-permuted Q/K rows a copy (the one copy of those bytes; the others are read
    from the map by whoever packs or fuses them). `tgi.core.loading.block_weights` makes them
    `BlockWeight`s."""
    reader = open_reader(path)
    permuted = _field(reader, "general.architecture") == "llama"
    for tensor in reader.tensors:
        name = hf_tensor_name(tensor.name)
        qtype = tensor.tensor_type.name
        if name is None or qtype not in qtypes or len(tensor.shape) != 2:
            continue
        rows, cols = int(tensor.shape[1]), int(tensor.shape[0])
        raw = np.asarray(tensor.data).view(np.uint8).reshape(rows, -1)  # read-only view of the memory map
        if permuted:
            raw = _unpermute_projection(name, raw, config)
        yield name, qtype, raw, rows, cols
