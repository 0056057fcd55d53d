"""`load_transformers_gguf` gives transformers' own model of a GGUF file, converted once and then read from
its cached checkpoint: the same tensors as `from_pretrained(folder, gguf_file=...)`, a new conversion when
the file changes."""

from __future__ import annotations

import os

import torch
from tiny_checkpoints import tiny_model, write_gguf

from tgi.core.testing.transformers_gguf import cached_checkpoint, load_transformers_gguf


def assert_same_model(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name, tensor in sa.items():
        assert tensor.dtype == sb[name].dtype and torch.equal(tensor, sb[name]), name


def test_the_cached_checkpoint_holds_transformers_own_reading(tmp_path, monkeypatch):
    monkeypatch.setenv("TGI_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "tiny.gguf"
    write_gguf(path, tiny_model("llama"), "llama")
    direct = load_transformers_gguf(path, use_cache=False)
    assert not cached_checkpoint(path).exists()

    first = load_transformers_gguf(path)  # converts and saves
    folder = cached_checkpoint(path)
    assert (folder / "config.json").is_file() and not first.training
    assert [p.name for p in folder.parent.iterdir() if ".tmp-" in p.name] == []  # moved into place whole
    assert_same_model(first, direct)

    (folder / "model.safetensors").rename(folder / "moved.safetensors")  # the second load reads the cache:
    (folder / "model.safetensors").symlink_to(folder / "moved.safetensors")  # the same file, another name
    assert_same_model(load_transformers_gguf(path), direct)
    assert (
        load_transformers_gguf(path, dtype=torch.bfloat16).model.embed_tokens.weight.dtype == torch.bfloat16
    )

    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # the file changed: a new key
    assert cached_checkpoint(path) != folder
