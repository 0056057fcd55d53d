"""Config and weight loading (safetensors and GGUF); resolution and tokenizers are in test_resolve.py."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from tiny_checkpoints import assert_same_weights, tiny_config, tiny_model, write_gguf

from tgi.core.loading import ModelSource, iter_weights, load_config, resolve_model
from tgi.core.models import UnsupportedModelError


@pytest.fixture(scope="module")
def default_source() -> ModelSource:
    return resolve_model(None)


@pytest.fixture(scope="module")
def default_config(default_source):
    return load_config(default_source)


# -- safetensors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind,dtype", [("llama", torch.float32), ("qwen2", torch.float32), ("llama", torch.bfloat16)]
)
def test_safetensors_round_trip(tmp_path, kind, dtype):
    model = tiny_model(kind, dtype)
    model.save_pretrained(tmp_path, safe_serialization=True)
    source = resolve_model(str(tmp_path))
    assert source.format == "safetensors" and source.path == str(tmp_path.resolve())
    config = load_config(source)
    assert type(config) is type(model.config)
    assert config.architectures == [type(model).__name__]
    assert config.num_key_value_heads == 2 and config.hidden_size == 64
    assert config.dtype == dtype
    assert_same_weights(dict(iter_weights(source, config)), model)  # bf16 stays bf16


def test_safetensors_sharded(tmp_path):
    model = tiny_model("llama")
    model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 2
    source = resolve_model(str(tmp_path))
    assert_same_weights(dict(iter_weights(source, load_config(source))), model)


@pytest.mark.parametrize(
    "where", ["../outside/model.safetensors", "absolute", "shards/../../outside/model.safetensors"]
)
def test_safetensors_index_paths_stay_in_the_model_folder(tmp_path, where):
    """A shard named by the index must be a file of the model folder: another file of the machine, even a
    valid checkpoint, is refused by name before it is opened."""
    model = tiny_model("llama")
    outside = tmp_path / "outside"
    model.save_pretrained(outside, safe_serialization=True)  # a real checkpoint, out of the folder
    folder = tmp_path / "model"
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="40KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = str(outside / "model.safetensors") if where == "absolute" else where
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = shard
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    source = resolve_model(str(folder))
    with pytest.raises(ValueError, match=f"{re.escape(shard)}.*outside the model folder"):
        list(iter_weights(source, tiny_config("llama")))


def test_safetensors_select(tmp_path):
    model = tiny_model("llama")
    model.save_pretrained(tmp_path, safe_serialization=True)
    source = resolve_model(str(tmp_path))
    expected = model.state_dict()

    def select(name: str):
        if name.endswith("q_proj.weight"):
            return (slice(16, 32),)  # one tensor-parallel rank's rows
        if name.endswith("o_proj.weight"):
            return slice(None), slice(0, 16)  # columns
        return "layers.0." in name or None

    got = dict(iter_weights(source, load_config(source), select=select))
    assert all(
        "layers.1." not in n or ("_proj.weight" in n and ("q_proj" in n or "o_proj" in n)) for n in got
    )
    assert torch.equal(
        got["model.layers.1.self_attn.q_proj.weight"],
        expected["model.layers.1.self_attn.q_proj.weight"][16:32],
    )
    assert torch.equal(
        got["model.layers.0.self_attn.o_proj.weight"],
        expected["model.layers.0.self_attn.o_proj.weight"][:, :16],
    )
    assert torch.equal(
        got["model.layers.0.mlp.up_proj.weight"], expected["model.layers.0.mlp.up_proj.weight"]
    )
    assert "model.embed_tokens.weight" not in got


# -- GGUF -------------------------------------------------------------------------------------------------


def test_gguf_config_of_default_model(default_config):
    c = default_config
    assert c.architectures == ["LlamaForCausalLM"] and c.model_type == "llama"
    assert (c.num_attention_heads, c.num_key_value_heads, c.num_hidden_layers) == (9, 3, 30)
    assert (c.hidden_size, c.intermediate_size, c.head_dim) == (576, 1536, 64)
    assert c.tie_word_embeddings is True
    assert c.vocab_size == 49152
    assert c.rope_parameters == {"rope_type": "default", "rope_theta": 100000.0}
    assert c.max_position_embeddings == 8192
    assert c.rms_norm_eps == pytest.approx(1e-5)
    assert (c.bos_token_id, c.eos_token_id) == (1, 2)
    assert c.dtype == torch.float32


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_gguf_synthetic_round_trip(tmp_path, kind):
    """A tiny model written as llama.cpp would (Q/K permuted for llama, biases for qwen2) loads back exactly."""
    model = tiny_model(kind)
    path = tmp_path / f"tiny-{kind}.gguf"
    write_gguf(path, model, kind)
    source = resolve_model(str(path))
    config = load_config(source)
    assert type(config) is type(model.config)
    assert config.architectures == [type(model).__name__]
    for field in ("vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"):
        assert getattr(config, field, None) == getattr(model.config, field, None), field
    assert config.tie_word_embeddings is False
    assert_same_weights(dict(iter_weights(source, config)), model)

    # A tensor-parallel rank's slice of the unpermuted Q projection.
    q = "model.layers.1.self_attn.q_proj.weight"
    got = dict(iter_weights(source, config, select=lambda n: (slice(16, 48),) if n == q else None))
    assert list(got) == [q] and torch.equal(got[q], model.state_dict()[q][16:48])


def test_gguf_llama3_rope_freqs(tmp_path):
    """llama.cpp stores Llama-3 rope scaling as a rope_freqs tensor; it comes back as rope_type llama3."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    model = tiny_model("llama")
    cfg = model.config
    params = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    cfg.rope_parameters = params
    cfg.max_position_embeddings = 1024
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    plain = 1.0 / (params["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    rope_freqs = (plain / scaled.double()).numpy()
    assert rope_freqs.max() == pytest.approx(8.0) and rope_freqs.min() == pytest.approx(1.0)
    path = tmp_path / "tiny-llama3.gguf"
    import gguf

    orig_add = gguf.GGUFWriter.add_context_length

    def add_ctx(self, n):  # also record the original context length, as the converter does
        orig_add(self, n)
        self.add_rope_scaling_orig_ctx_len(64)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gguf.GGUFWriter, "add_context_length", add_ctx)
        write_gguf(path, model, "llama", rope_freqs=rope_freqs)
    config = load_config(resolve_model(str(path)))
    assert config.rope_parameters == params
    assert "rope_freqs.weight" not in dict(iter_weights(resolve_model(str(path)), config))


def test_gguf_rope_scaling_of_an_unsupported_type_is_refused(tmp_path):
    import gguf

    def longrope(w):
        w.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)
        w.add_rope_scaling_factor(4.0)

    path = tmp_path / "tiny-longrope.gguf"
    write_gguf(path, tiny_model("llama"), "llama", metadata=longrope)
    with pytest.raises(UnsupportedModelError, match=r"tiny-longrope\.gguf: .*rope scaling type 'longrope'"):
        load_config(resolve_model(str(path)))


@pytest.mark.parametrize(
    ("key", "value", "refused"), [("attn_factor", 0.5, True), ("attn_factor", 1.0, False)]
)
def test_gguf_rope_scaling_parameters_tgi_does_not_read_are_refused(tmp_path, key, value, refused):
    import gguf

    def yarn(w):
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(4.0)
        w.add_float32(f"llama.rope.scaling.{key}", value)

    path = tmp_path / "tiny-yarn.gguf"
    write_gguf(path, tiny_model("llama"), "llama", metadata=yarn)
    if refused:
        with pytest.raises(UnsupportedModelError, match=rf"llama\.rope\.scaling\.{key} = {value}"):
            load_config(resolve_model(str(path)))
    else:
        assert load_config(resolve_model(str(path))).rope_parameters["rope_type"] == "yarn"


def test_gguf_rope_freqs_that_are_not_llama3_scaling_are_refused(tmp_path):
    """A rope_freqs tensor says the frequencies are scaled; scaling tgi cannot name is not dropped."""
    model = tiny_model("llama")
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    path = tmp_path / "tiny-rope-freqs.gguf"
    write_gguf(path, model, "llama", rope_freqs=np.linspace(1.0, 3.0, head_dim // 2))
    with pytest.raises(UnsupportedModelError, match=r"tiny-rope-freqs\.gguf: .*rope_freqs"):
        load_config(resolve_model(str(path)))


# -- numpy arrays (for backends of other frameworks) -----------------------------------------------------
