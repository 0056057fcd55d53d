"""--trust-remote-code: a checkpoint with code of its own (config.json's `auto_map` pointing to
configuration_custom.py / modeling_custom.py in its folder, a `model_type` transformers does not know) is
refused at start naming the flag, and with the flag runs through the transformers fallback on the
checkpoint's own model class: greedy tokens equal transformers' (`trust_remote_code=True`) on the same
folder, alone and batched with preemption, on the CPU backend in float32. The custom model negates its
logits (src/tgi/core/testing/remote_code.py), so equal tokens show that its code, not Llama's, ran."""

from __future__ import annotations

import json

import pytest
import torch

from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.loading import load_config, resolve_model
from tgi.core.models.registry import model_class_for, model_path
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import PROMPTS
from tgi.core.testing.remote_code import ARCHITECTURE, save_remote_code_checkpoint

MAX_NEW_TOKENS = 8


def _engine_config(folder, **kwargs) -> EngineConfig:
    # 64 tokens of KV: the longest request (45 + 8) fits alone, the three together (95) do not
    return EngineConfig(
        model_id=str(folder), backend="cpu", dtype="float32", block_size=4, max_total_tokens=64,
        max_batch_total_tokens=64, max_batch_prefill_tokens=32, max_num_seqs=8, **kwargs,
    )  # fmt: skip


def _transformers_greedy(folder, prompts, max_new_tokens, trust_remote_code=True) -> list[list[int]]:
    """transformers' own greedy decoding of the folder (`generate`, its KV cache, EOS not stopping it)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, trust_remote_code=trust_remote_code
    ).eval()
    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids = model.generate(
                torch.tensor([list(prompt)]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                # as ignore_eos where EOS is never the greedy choice; were it, the engine's tokens would differ
                min_new_tokens=max_new_tokens,
            )
            out.append(ids[0, len(prompt) :].tolist())
    return out


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_remote_code_checkpoint(tmp_path_factory.mktemp("remote") / "custom")


@pytest.fixture(scope="module")
def reference(checkpoint) -> list[list[int]]:
    """transformers' greedy tokens of the checkpoint's own code for every prompt, once for the module."""
    return _transformers_greedy(checkpoint, PROMPTS, MAX_NEW_TOKENS)


def test_without_the_flag_the_checkpoint_is_refused_naming_it(checkpoint):
    with pytest.raises(ConfigError, match=r"--trust-remote-code \(TRUST_REMOTE_CODE=true\)") as e:
        LLMEngine.from_config(_engine_config(checkpoint))
    assert "configuration_custom.CustomLlamaConfig" in str(e.value)
    with pytest.raises(ConfigError, match="--trust-remote-code"):
        load_config(resolve_model(str(checkpoint)))


def test_with_the_flag_the_fallback_runs_the_checkpoint_code_as_transformers_does(checkpoint, reference):
    source = resolve_model(str(checkpoint), trust_remote_code=True)
    config = load_config(source)
    assert type(config).__name__ == "CustomLlamaConfig" and model_path(config) == "transformers"
    assert model_class_for(config).__name__ == "TransformersCausalLM"

    engine = LLMEngine.from_config(_engine_config(checkpoint, trust_remote_code=True))
    # what `tgi launch` prints after "weights loaded:"
    assert (
        engine.model_info.architecture == f"{ARCHITECTURE} (transformers fallback with the checkpoint's code)"
    )
    assert type(engine.runner.model.hf).__module__.startswith("transformers_modules")
    params = SamplingParams(max_new_tokens=MAX_NEW_TOKENS, ignore_eos=True)
    alone = engine.generate([list(PROMPTS[0])], params)
    assert [r.token_ids for r in alone] == reference[:1]
    batched = engine.generate([list(p) for p in PROMPTS], params)
    assert engine.scheduler.num_preemptions > 0
    assert [r.token_ids for r in batched] == reference


def test_the_checkpoint_code_is_what_runs(checkpoint, reference, tmp_path):
    """The same weights without the custom code (a plain Llama) decode other tokens: the engine's equal
    tokens above come from the checkpoint's own model class."""
    data = json.loads((checkpoint / "config.json").read_text())
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in checkpoint.iterdir():
        if f.suffix in (".safetensors", ".json"):
            (plain / f.name).write_bytes(f.read_bytes())
    data.update(model_type="llama", architectures=["LlamaForCausalLM"])
    del data["auto_map"], data["final_logit_scale"]
    (plain / "config.json").write_text(json.dumps(data))
    llama = _transformers_greedy(plain, PROMPTS[:1], MAX_NEW_TOKENS, trust_remote_code=False)
    assert llama != reference[:1]  # the custom code's tokens of the same prompt


@pytest.mark.parametrize(
    ("model_type", "config_class"), [("llama", "LlamaConfig"), ("tgi_custom_llama", "CustomLlamaConfig")]
)
def test_a_native_architecture_never_runs_the_checkpoint_model_code(tmp_path, model_type, config_class):
    """With the flag, a checkpoint whose architecture is native runs tgi's model (never its modeling_*.py);
    a `model_type` transformers knows keeps transformers' config class (its `auto_map` ignored)."""
    folder = save_remote_code_checkpoint(tmp_path / "native")
    data = json.loads((folder / "config.json").read_text())
    data.update(model_type=model_type, architectures=["LlamaForCausalLM"])
    (folder / "config.json").write_text(json.dumps(data))
    (folder / "modeling_custom.py").write_text("raise RuntimeError('the checkpoint model code ran')\n")
    config = load_config(resolve_model(str(folder), trust_remote_code=True))
    assert type(config).__name__ == config_class
    assert model_path(config) == "native" and model_class_for(config).__module__ == "tgi.core.models.llama"
    engine = LLMEngine.from_config(_engine_config(folder, trust_remote_code=True))
    assert engine.model_info.architecture == "LlamaForCausalLM"
