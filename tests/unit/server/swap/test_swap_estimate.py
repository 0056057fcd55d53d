"""A model swap's memory estimate reads the new model's config only: from the hub, `config.json` and no weight
file; from a folder, no checkpoint code runs even on a server whose engine trusts remote code."""

from __future__ import annotations

import json

import huggingface_hub
import pytest

from tgi.core.config import EngineConfig
from tgi.server.swap.swapper import estimate_bytes

LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1000, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 512,
}  # fmt: skip
CONFIG = EngineConfig(dtype="float32", max_batch_total_tokens=1024)


def test_a_hub_model_is_estimated_from_its_config_alone(monkeypatch, tmp_path):
    fetched = []

    def hf_hub_download(repo_id, filename, **kw):
        fetched.append((repo_id, filename))
        (tmp_path / filename).write_text(json.dumps(LLAMA))
        return str(tmp_path / filename)

    def snapshot_download(repo_id, **kw):
        fetched.append((repo_id, kw.get("allow_patterns")))
        raise AssertionError("a snapshot fetches weight files")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    need, what = estimate_bytes("someone/some-model", "main", CONFIG)
    assert fetched == [("someone/some-model", "config.json")]
    params = 1000 * 64 * 2 + 2 * (64 * 16 * (2 * 4 + 2 * 2) + 3 * 64 * 128)
    assert need == params * 4 + 1024 * 2 * 2 * 2 * 16 * 4 and "float32" in what


def test_no_checkpoint_code_runs_during_the_estimate(tmp_path):
    folder, marker = tmp_path / "custom", tmp_path / "ran"
    folder.mkdir()
    config = {
        **LLAMA,
        "model_type": "probe_custom",
        "auto_map": {"AutoConfig": "configuration_probe.ProbeConfig"},
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_probe.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import PretrainedConfig\n\n"
        "class ProbeConfig(PretrainedConfig):\n    model_type = 'probe_custom'\n"
    )
    (folder / "model.safetensors").write_bytes(len(b"{}").to_bytes(8, "little") + b"{}")
    trusting = EngineConfig(dtype="float32", max_batch_total_tokens=1024, trust_remote_code=True)
    need, _ = estimate_bytes(str(folder), None, trusting)
    assert need > 0 and not marker.exists()


def test_a_folder_without_a_config_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError):
        estimate_bytes(str(tmp_path), None, CONFIG)
