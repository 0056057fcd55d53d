"""Weights as numpy arrays (`iter_weights(..., framework="numpy")`): safetensors mapped from the file, GGUF
dequantized to float32, bfloat16 through ml_dtypes; no other framework is served."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_checkpoints import tiny_model, write_gguf

from tgi.core.loading import iter_weights, load_config, resolve_model


def _same_as_arrays(tensors: dict[str, torch.Tensor], arrays: dict[str, np.ndarray]) -> None:
    assert set(arrays) == set(tensors)
    for name, array in arrays.items():
        assert isinstance(array, np.ndarray), name
        assert torch.equal(torch.from_numpy(np.array(array)), tensors[name]), name


@pytest.mark.parametrize("sharded", [False, True])
def test_safetensors_as_numpy_arrays_mapped_from_the_file(tmp_path, sharded):
    model = tiny_model("llama")
    model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="40KB" if sharded else "1GB")
    source = resolve_model(str(tmp_path))
    config = load_config(source)
    arrays = dict(iter_weights(source, config, framework="numpy"))
    _same_as_arrays(dict(iter_weights(source, config)), arrays)
    embed = arrays["model.embed_tokens.weight"]
    assert isinstance(embed, np.memmap) and not embed.flags.writeable  # mapped, not read into memory
    q = "model.layers.1.self_attn.q_proj.weight"
    select = lambda n: (slice(16, 48), slice(None, None)) if n == q else None  # noqa: E731
    [(name, part)] = iter_weights(source, config, select=select, framework="numpy")
    assert name == q and np.array_equal(part, model.state_dict()[q][16:48].numpy())


def test_safetensors_bfloat16_as_numpy_needs_ml_dtypes(tmp_path):
    model = tiny_model("llama", torch.bfloat16)
    model.save_pretrained(tmp_path, safe_serialization=True)
    source = resolve_model(str(tmp_path))
    arrays = iter_weights(source, load_config(source), framework="numpy")
    try:
        import ml_dtypes
    except ImportError:
        with pytest.raises(ImportError, match="ml_dtypes"):
            dict(arrays)
        return
    got = dict(arrays)
    assert got["model.norm.weight"].dtype == np.dtype(ml_dtypes.bfloat16)
    tensors = dict(iter_weights(source, load_config(source)))
    assert np.array_equal(
        got["model.norm.weight"].astype(np.float32), tensors["model.norm.weight"].float().numpy()
    )


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_gguf_as_numpy_arrays(tmp_path, kind):
    model = tiny_model(kind)
    path = tmp_path / f"tiny-{kind}.gguf"
    write_gguf(path, model, kind)
    source = resolve_model(str(path))
    config = load_config(source)
    tensors = dict(iter_weights(source, config))
    arrays = dict(iter_weights(source, config, framework="numpy"))
    assert set(arrays) == set(tensors)
    for name, array in arrays.items():
        assert array.dtype == np.float32 and np.array_equal(array, tensors[name].numpy()), name


def test_weights_come_as_torch_or_numpy_only(tmp_path):
    model = tiny_model("llama")
    model.save_pretrained(tmp_path, safe_serialization=True)
    source = resolve_model(str(tmp_path))
    with pytest.raises(ValueError, match="not 'jax'"):
        iter_weights(source, load_config(source), framework="jax")
