"""Tiny random Llama and Qwen2 checkpoints for the loading tests: the models (transformers, norms and biases
drawn so that every weight is distinguishable), a check that loaded weights equal them, and a GGUF writer
that lays them out as llama.cpp's converter does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch


def tiny_config(kind: str):
    from transformers import LlamaConfig, Qwen2Config

    cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[kind]
    return cls(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )


def tiny_model(kind: str, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(kind), dtype=dtype)
    with torch.no_grad():  # norms are initialised to ones: make them distinguishable
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.normal_()
    return model


def assert_same_weights(got: dict[str, torch.Tensor], model) -> None:
    expected = model.state_dict()
    if model.config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    assert set(got) == set(expected)
    for name, tensor in expected.items():
        assert got[name].dtype == tensor.dtype, name
        assert torch.equal(got[name], tensor), name


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's LlamaModel.permute (with n_head already the KV count for K)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


TO_GGUF = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def write_gguf(
    path: Path, model, arch: str, rope_freqs: np.ndarray | None = None, metadata: Callable | None = None
) -> None:
    """Write `model` as an F32 GGUF the way llama.cpp's converter does (names, Q/K permutation for llama);
    `metadata(writer)` adds more keys."""
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny {arch}")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg.vocab_size)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if metadata is not None:
        metadata(w)
    for name, t in model.state_dict().items():
        a = t.float().numpy().copy()
        if name == "lm_head.weight":
            if cfg.tie_word_embeddings:
                continue
            gname = "output.weight"
        elif name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        else:
            _, _, layer, rest = name.split(".", 3)
            module, kind = rest.rsplit(".", 1)
            gname = f"blk.{layer}.{TO_GGUF[module]}.{kind}"
            if arch == "llama" and module == "self_attn.q_proj":
                a = permute(a, cfg.num_attention_heads)
            elif arch == "llama" and module == "self_attn.k_proj":
                a = permute(a, cfg.num_key_value_heads)
        w.add_tensor(gname, a)
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
