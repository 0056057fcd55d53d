"""Linears loaded without their dense copy (`tgi.core.torch.dense_free_loading`): which checkpoint weights
qualify (every weight part of a linear stored in a format the backend computes for every row count; never
the embedding table, nor a bias), how `load_weights` takes their meta placeholders (the dense weight dropped,
refused when only part of a linear comes so), and the load-time check that such a linear got a kernel."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from tgi.core.interfaces.types import UnsupportedError
from tgi.core.models.registry import model_class_for
from tgi.core.torch.dense_free_loading import (
    check_dense_free_linears,
    dense_free_weights,
    skipping,
    with_placeholders,
)

H, INNER, V = 64, 128, 256


@pytest.fixture
def model():
    config = LlamaConfig(
        hidden_size=H, intermediate_size=INNER, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=V, tie_word_embeddings=False,
    )  # fmt: skip
    return model_class_for(config)(config, dtype=torch.float32, device="cpu")


def stored(formats: dict[str, str]) -> dict[str, tuple[str, int, int]]:
    shapes = {"q_proj": (H, H), "k_proj": (H // 2, H), "v_proj": (H // 2, H), "o_proj": (H, H)}
    shapes |= {"gate_proj": (INNER, H), "up_proj": (INNER, H), "down_proj": (H, INNER)}
    out = {}
    for name, fmt in formats.items():
        part = name.split(".")[-2]
        shape = shapes.get(part, (V, H))
        out[name] = (fmt, *shape)
    return out


ATTN = "model.layers.0.self_attn."
MLP = "model.layers.0.mlp."


def test_a_linear_qualifies_when_every_part_is_stored_in_a_standalone_format(model):
    formats = {
        f"{ATTN}q_proj.weight": "Q4_K", f"{ATTN}k_proj.weight": "Q4_K", f"{ATTN}v_proj.weight": "Q6_K",
        f"{ATTN}o_proj.weight": "Q4_K",
        f"{MLP}gate_proj.weight": "Q4_K", f"{MLP}up_proj.weight": "Q8_0",  # one part on a bounded kernel
        f"{MLP}down_proj.weight": "F32",
        "model.embed_tokens.weight": "Q6_K", "lm_head.weight": "Q6_K",
    }  # fmt: skip
    free = dense_free_weights(model, stored(formats), frozenset({"Q4_K", "Q6_K"}))
    # q/k/v (one fused linear, all K-quants), o and the untied head; not gate/up (Q8_0 up), down (F32), nor
    # the embedding table (looked up densely)
    assert set(free) == {f"{ATTN}{p}_proj.weight" for p in "qkvo"} | {"lm_head.weight"}
    assert free[f"{ATTN}k_proj.weight"] == (H // 2, H)
    assert dense_free_weights(model, stored(formats), frozenset()) == {}


def test_placeholders_drop_the_dense_weight_and_a_partial_linear_is_refused(model):
    free = {f"{ATTN}o_proj.weight": (H, H)}
    select = skipping(None, free)
    assert select(f"{ATTN}o_proj.weight") is False and select(f"{ATTN}q_proj.weight") is True
    dense = [
        (name, torch.zeros(shape))
        for name, shape in [
            *((f"{ATTN}{p}_proj.weight", (H if p == "q" else H // 2, H)) for p in "qkv"),
            *((f"{MLP}{p}_proj.weight", (INNER, H)) for p in ("gate", "up")),
            (f"{MLP}down_proj.weight", (H, INNER)),
            ("model.embed_tokens.weight", (V, H)), ("lm_head.weight", (V, H)),
            ("model.norm.weight", (H,)), ("model.layers.0.input_layernorm.weight", (H,)),
            ("model.layers.0.post_attention_layernorm.weight", (H,)),
        ]
    ]  # fmt: skip
    model.load_weights(with_placeholders(dense, free, None))  # the selector before `skipping`
    o_proj = model.model.layers[0].self_attn.o_proj
    assert o_proj.weight.is_meta and not model.model.layers[0].self_attn.qkv_proj.weight.is_meta
    with pytest.raises(UnsupportedError, match="o_proj: loaded without its dense weight"):
        check_dense_free_linears(model)  # no kernel attached
    o_proj.quant_format = "gguf-Q4_K"
    check_dense_free_linears(model)

    partial = {f"{ATTN}k_proj.weight": (H // 2, H)}  # q and v dense, k without: refused
    fresh = type(model)(model.config, dtype=torch.float32, device="cpu")
    kept = [(n, t) for n, t in dense if n != f"{ATTN}k_proj.weight"] + [
        (f"{ATTN}o_proj.weight", torch.zeros(H, H))
    ]
    with pytest.raises(ValueError, match=r"qkv_proj\.weight came partly without its dense values"):
        fresh.load_weights(with_placeholders(kept, partial, None))


def test_a_linear_with_a_bias_loads_its_bias_beside_the_placeholders():
    """Qwen2's q/k/v carry biases (1-D, stored dense): the weights may still come without a dense copy."""
    from transformers import Qwen2Config

    config = Qwen2Config(
        hidden_size=H, intermediate_size=INNER, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=V, tie_word_embeddings=True,
    )  # fmt: skip
    model = model_class_for(config)(config, dtype=torch.float32, device="cpu")
    qkv = {f"{ATTN}{p}_proj.weight": "Q4_K" for p in "qkv"}
    free = dense_free_weights(model, stored(qkv), frozenset({"Q4_K"}))
    assert set(free) == set(qkv)
    dense = [
        (name, torch.ones(shape))
        for name, shape in [
            (f"{ATTN}q_proj.bias", (H,)), (f"{ATTN}k_proj.bias", (H // 2,)), (f"{ATTN}v_proj.bias", (H // 2,)),
            (f"{ATTN}o_proj.weight", (H, H)),
            *((f"{MLP}{p}_proj.weight", (INNER, H)) for p in ("gate", "up")),
            (f"{MLP}down_proj.weight", (H, INNER)), ("model.embed_tokens.weight", (V, H)),
            ("model.norm.weight", (H,)), ("model.layers.0.input_layernorm.weight", (H,)),
            ("model.layers.0.post_attention_layernorm.weight", (H,)),
        ]
    ]  # fmt: skip
    model.load_weights(with_placeholders(dense, free, None))
    qkv_proj = model.model.layers[0].self_attn.qkv_proj
    assert qkv_proj.weight.is_meta and bool((qkv_proj.bias == 1).all())
