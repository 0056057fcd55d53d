"""A Llama-family checkpoint as stacked numpy arrays for the JAX model (no torch: GGUF and safetensors
arrays come from core's loaders as numpy).

Per-layer weights are stacked along a leading layer axis (`[L, ...]`) so that the model runs its layers with
one `jax.lax.scan` (compile time does not grow with depth); linear weights are transposed to `[in, out]`.
`ModelDims` holds the sizes; `SUPPORTED` the architectures (those of core's Llama family that need nothing
beyond RMSNorm, RoPE, grouped-query attention and a gated SiLU MLP; Qwen2's q/k/v biases included).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tgi.core.interfaces import UnsupportedError
from tgi.core.loading.source import ModelSource

SUPPORTED = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
#: rope types whose frequencies do not depend on the sequence length (core's `compute_inv_freq`)
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic")

#: HF name inside `model.layers.N.` -> (our name, transpose)
_LAYER = {
    "input_layernorm.weight": ("attn_norm", False),
    "self_attn.q_proj.weight": ("wq", True),
    "self_attn.k_proj.weight": ("wk", True),
    "self_attn.v_proj.weight": ("wv", True),
    "self_attn.q_proj.bias": ("bq", False),
    "self_attn.k_proj.bias": ("bk", False),
    "self_attn.v_proj.bias": ("bv", False),
    "self_attn.o_proj.weight": ("wo", True),
    "post_attention_layernorm.weight": ("mlp_norm", False),
    "mlp.gate_proj.weight": ("w_gate", True),
    "mlp.up_proj.weight": ("w_up", True),
    "mlp.down_proj.weight": ("w_down", True),
}


@dataclass(frozen=True)
class ModelDims:
    vocab_size: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    num_layers: int
    rms_norm_eps: float
    qkv_bias: bool
    tie_word_embeddings: bool

    @classmethod
    def from_config(cls, config) -> ModelDims:
        arch = (getattr(config, "architectures", None) or ["?"])[0]
        if arch not in SUPPORTED:
            raise UnsupportedError(
                f"the tpu backend (JAX) runs {', '.join(SUPPORTED)}; this checkpoint is {arch}"
            )
        window = getattr(config, "sliding_window", None)
        if (
            window is not None
            and getattr(config, "use_sliding_window", True)
            and window < config.max_position_embeddings
        ):
            raise UnsupportedError(
                f"the tpu backend (JAX) has no sliding-window attention ({arch}: {window})"
            )
        from tgi.core.models.rotary import head_dim_of, rope_parameters, rotary_dim_of

        rope = rope_parameters(config)["rope_type"]
        if rope not in ROPE_TYPES:
            raise UnsupportedError(
                f"the tpu backend (JAX) computes RoPE {', '.join(ROPE_TYPES)}, not {rope!r}"
            )
        if rotary_dim_of(config) != head_dim_of(config):
            raise UnsupportedError("the tpu backend (JAX) rotates whole heads (no partial rotary factor)")
        if getattr(config, "hidden_act", "silu") != "silu":
            raise UnsupportedError(f"the tpu backend (JAX) computes SiLU MLPs, not {config.hidden_act}")
        heads = config.num_attention_heads
        return cls(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_heads=heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            intermediate_size=config.intermediate_size,
            num_layers=config.num_hidden_layers,
            rms_norm_eps=config.rms_norm_eps,
            qkv_bias=arch == "Qwen2ForCausalLM" or bool(getattr(config, "attention_bias", False)),
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        )

    def check_shards(self, n: int) -> None:
        """`UnsupportedError` unless heads, KV heads and the MLP split evenly over `n` devices."""
        for what, size in (
            ("attention heads", self.num_heads),
            ("key/value heads", self.num_kv_heads),
            ("MLP width", self.intermediate_size),
        ):
            if size % n:
                raise UnsupportedError(
                    f"--num-shard {n}: the model's {size} {what} do not split over {n} devices"
                )


def _arrays(source: ModelSource, config):
    if source.format == "gguf":
        from tgi.core.loading.gguf_loader import iter_gguf_arrays

        return iter_gguf_arrays(source.path, config)
    from tgi.core.loading.safetensors_arrays import iter_safetensors_arrays

    return iter_safetensors_arrays(source.path)


def load_stacked(source: ModelSource, config, dims: ModelDims, dtype) -> tuple[dict, bool]:
    """`{"embed", "norm", "lm_head", "layers": {name: [L, ...]}}` numpy arrays in `dtype` (a numpy dtype,
    `ml_dtypes.bfloat16` included), and whether the head is the embeddings (tied). Raises `UnsupportedError` for tensors it does not know (quantized
    formats, other architectures' extras) rather than ignoring them."""
    layers: dict[str, np.ndarray] = {}
    top: dict[str, np.ndarray] = {}
    for name, w in _arrays(source, config):
        if name.startswith("model.layers."):
            index, rest = name[len("model.layers.") :].split(".", 1)
            if rest.endswith("rotary_emb.inv_freq"):
                continue
            if rest not in _LAYER:
                raise UnsupportedError(f"the tpu backend (JAX) does not know the tensor {name}")
            key, transpose = _LAYER[rest]
            arr = np.asarray(w).T if transpose else np.asarray(w)
            if key not in layers:
                layers[key] = np.empty((dims.num_layers, *arr.shape), dtype)
            layers[key][int(index)] = arr
        elif name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
            top[name] = np.asarray(w)
        else:
            raise UnsupportedError(f"the tpu backend (JAX) does not know the tensor {name}")
    embed = top["model.embed_tokens.weight"].astype(dtype)
    head = top.get("lm_head.weight")
    tied = head is None
    if tied:
        if not dims.tie_word_embeddings:
            raise UnsupportedError(
                "the checkpoint has no lm_head.weight and does not tie it to the embeddings"
            )
        head = top["model.embed_tokens.weight"]
    expected = set(k for k, _ in _LAYER.values()) - (set() if dims.qkv_bias else {"bq", "bk", "bv"})
    missing = expected - set(layers)
    if missing:
        raise UnsupportedError(f"the checkpoint lacks layer tensors: {', '.join(sorted(missing))}")
    arrays = {
        "embed": embed,
        "norm": top["model.norm.weight"].astype(dtype),
        "lm_head": np.ascontiguousarray(head.T).astype(dtype),
        "layers": layers,
    }
    return arrays, tied
