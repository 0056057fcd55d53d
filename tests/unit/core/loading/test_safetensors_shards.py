"""`tgi.core.loading.safetensors_shards`: the one walk over a safetensors checkpoint's shards that the torch
and numpy readers share."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file

from tgi.core.loading.safetensors_arrays import iter_safetensors_arrays
from tgi.core.loading.safetensors_loader import iter_safetensors_weights
from tgi.core.loading.safetensors_shards import INDEX_FILE, iter_shards


def _write_shards(folder, shards: dict[str, dict[str, np.ndarray]]) -> None:
    weight_map = {}
    for file, tensors in shards.items():
        save_file(tensors, str(folder / file))
        weight_map.update(dict.fromkeys(tensors, file))
    (folder / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def test_each_shard_lists_the_tensors_the_selection_keeps(tmp_path):
    _write_shards(
        tmp_path,
        {
            "a.safetensors": {"w.b": np.ones((4, 2), np.float32), "w.a": np.zeros(3, np.float16)},
            "b.safetensors": {"skip.me": np.zeros(2, np.int8), "half": np.arange(8, dtype=np.float32)},
        },
    )
    parts = {"w.a": True, "w.b": slice(0, 2), "half": (slice(4, None),)}
    shards = list(iter_shards(str(tmp_path), parts.get))
    assert [s.path.name for s in shards] == ["a.safetensors", "b.safetensors"]
    assert shards[0].tensors == (("w.a", None), ("w.b", (slice(0, 2),)))
    assert shards[1].tensors == (("half", (slice(4, None),)),)
    assert set(shards[1].header) == {"skip.me", "half"}  # the header lists what the selection skips
    assert shards[1].header["half"]["dtype"] == "F32" and shards[0].data_start > 8
    # both readers read what the walk hands them, the same values
    arrays = dict(iter_safetensors_arrays(str(tmp_path), parts.get))
    tensors = dict(iter_safetensors_weights(str(tmp_path), parts.get))
    assert list(arrays) == list(tensors) == ["w.a", "w.b", "half"]
    for name, array in arrays.items():
        np.testing.assert_array_equal(array, tensors[name].numpy())
    np.testing.assert_array_equal(arrays["half"], [4, 5, 6, 7])


def test_a_tensor_in_two_shards_is_refused_before_that_shard_is_read(tmp_path):
    _write_shards(
        tmp_path,
        {"a.safetensors": {"w": np.zeros(2, np.float32)}, "b.safetensors": {"v": np.zeros(1, np.float32)}},
    )
    save_file({"v": np.zeros(1, np.float32), "w": np.ones(2, np.float32)}, str(tmp_path / "b.safetensors"))
    walk = iter_shards(str(tmp_path))
    assert next(walk).tensors == (("w", None),)
    with pytest.raises(ValueError, match="tensor 'w' appears in more than one shard"):
        next(walk)


def test_it_imports_neither_torch_nor_numpy():
    code = (
        "import sys, tgi.core.loading.safetensors_shards; "
        "assert not {'torch', 'numpy', 'jax'} & set(sys.modules), sorted(sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
