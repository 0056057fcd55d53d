"""Multi-LoRA (`--lora-adapters`, issue 20) on a tiny random Llama with adapters made by `peft` (random non-zero
B): greedy tokens with each adapter equal transformers + peft on the same weights, for requests of three
adapters and of the base model mixed in one batch (prefill chunks and decodes of different adapters in the
same steps); an adapter that does not fit is refused at start-up with the reason; an unknown adapter id is
a validation error."""

from __future__ import annotations

import json

import pytest
import torch

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.lora import AdapterError
from tgi.core.request import ValidationError
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.lora import peft_greedy, write_random_lora
from tgi.core.testing.model import PROMPTS, VOCAB_SIZE, write_tiny_llama
from tgi.core.testing.tiny_models import save_random_model

MAX_NEW = 8
#: three adapters unlike each other: all projections, attention only (rsLoRA), MLP only
ADAPTERS = {
    "all": dict(r=8, lora_alpha=16, seed=1),
    "attn": dict(r=4, lora_alpha=8, target_modules=("q_proj", "v_proj", "o_proj"), use_rslora=True, seed=2),
    "mlp": dict(r=6, lora_alpha=6, target_modules=("gate_proj", "down_proj"), seed=3),
}


@pytest.fixture(scope="module")
def lora_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    base = write_tiny_llama(root / "base")
    paths = {name: write_random_lora(root / name, base, **kw) for name, kw in ADAPTERS.items()}
    return base, paths


def _engine(base, adapters, **limits) -> LLMEngine:
    config = EngineConfig(
        model_id=str(base), backend="cpu", dtype="float32", block_size=16, max_total_tokens=128,
        max_batch_total_tokens=2048, max_batch_prefill_tokens=32, max_num_seqs=16,
        lora_adapters=tuple((name, str(path)) for name, path in adapters.items()), **limits,
    )  # fmt: skip
    return LLMEngine.from_config(config)


def _run(engine: LLMEngine, requests: list[tuple[list[int], str | None]]) -> list[list[int]]:
    params = [SamplingParams(max_new_tokens=MAX_NEW, ignore_eos=True, adapter_id=a) for _, a in requests]
    return [r.token_ids for r in engine.generate([list(p) for p, _ in requests], params)]


@pytest.fixture(scope="module")
def peft_tokens(lora_model):
    base, paths = lora_model
    return {
        a: peft_greedy(base, None if a is None else paths[a], PROMPTS, MAX_NEW) for a in (None, *ADAPTERS)
    }


# the CPU backend's native pair (every step), then core's torch ops with each of their two passes forced:
# per adapter gather/scatter, all adapters stacked and masked
@pytest.mark.parametrize(
    ("stacked_fraction", "stacked_max_tokens", "native_tokens"),
    [(0.25, 64, "2048"), (0.0, 0, "0"), (100.0, 10**9, "0")],
)
def test_mixed_batch_equals_peft_per_adapter(
    lora_model, peft_tokens, stacked_fraction, stacked_max_tokens, native_tokens, monkeypatch
):
    monkeypatch.setattr("tgi.core.lora.ops.STACKED_FRACTION", stacked_fraction)
    monkeypatch.setattr("tgi.core.lora.ops.STACKED_MAX_TOKENS", stacked_max_tokens)
    monkeypatch.setenv("TGI_CPU_LORA_NATIVE_TOKENS", native_tokens)
    base, paths = lora_model
    engine = _engine(base, paths)
    ops = engine.runner.lora.state.ops
    assert ops.describe(torch.float32).startswith("native" if native_tokens != "0" else "torch ops")
    assert engine.model_info.lora_adapters == tuple(ADAPTERS)
    names = [None, *ADAPTERS]
    # every prompt with every adapter and with none, all in one batch (the 45-token prompt is chunked)
    requests = [(p, a) for p in PROMPTS for a in names]
    got = _run(engine, requests)
    want = peft_tokens
    for (prompt, adapter), tokens in zip(requests, got, strict=True):
        assert tokens == want[adapter][PROMPTS.index(prompt)], f"adapter {adapter}"
    for a in ADAPTERS:  # the adapters matter: each changes some output of the base model
        assert want[a] != want[None], f"adapter {a} does not change the greedy tokens: the test is vacuous"
    # alone, each request gets the same tokens as in the mixed batch
    for (prompt, adapter), tokens in list(zip(requests, got, strict=True))[::5]:
        assert _run(engine, [(prompt, adapter)]) == [tokens]


def test_unknown_adapter_is_a_validation_error(lora_model):
    base, paths = lora_model
    engine = _engine(base, {"all": paths["all"]})
    with pytest.raises(ValidationError, match=r"adapter `nope` is not loaded.*all"):
        engine.add_request([1, 2, 3], SamplingParams(adapter_id="nope"))


def test_adapter_for_another_model_is_refused_at_start(lora_model, tmp_path):
    base, _ = lora_model
    other = save_random_model(tmp_path / "other", "llama", hidden_size=32, intermediate_size=64, num_heads=4)
    wrong = write_random_lora(tmp_path / "wrong", other, seed=4)
    with pytest.raises(AdapterError, match=r"'wrong'.*trained for another model"):
        _engine(base, {"wrong": wrong})


def test_unsupported_peft_settings_are_refused(lora_model, tmp_path):
    base, paths = lora_model
    import shutil

    dora = tmp_path / "dora"
    shutil.copytree(paths["attn"], dora)
    config = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(AdapterError, match="'dora': DoRA"):
        _engine(base, {"dora": dora})
    head = write_random_lora(tmp_path / "head", base, target_modules=("lm_head",), seed=5)
    with pytest.raises(AdapterError, match="lm_head is not an attention or MLP projection"):
        _engine(base, {"head": head})


def test_two_ranks_give_the_tokens_of_one(lora_model, peft_tokens):
    """Tensor parallelism (gloo, two processes): lora_A/B sharded like the layers they adapt. One rank's
    tokens are peft's (test_mixed_batch_equals_peft_per_adapter): the two ranks are held to those."""
    import multiprocessing

    base, paths = lora_model
    requests = [(p, a) for p in PROMPTS[1:] for a in (None, *ADAPTERS)]
    one = [peft_tokens[a][PROMPTS.index(p)] for p, a in requests]
    engine = _engine(base, paths, num_shard=2)
    try:
        assert _run(engine, requests) == one
    finally:
        engine.runner.shutdown()
    assert not multiprocessing.active_children()


def test_a_draft_model_guesses_for_adapter_requests(lora_model, peft_tokens, tmp_path):
    """--speculative-model with adapters: the draft (another model) loads without them; verification keeps
    each request's tokens those of its adapter (peft's, as one engine without a draft gives them)."""
    base, paths = lora_model
    # another shape, the same vocabulary: the adapters do not fit it
    draft = save_random_model(
        tmp_path / "draft",
        "llama",
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        intermediate_size=64,
        num_heads=4,
        max_position_embeddings=256,
        init_std=0.08,
    )  # fmt: skip
    requests = [(p, a) for p in PROMPTS[1:] for a in (None, "all")]
    plain = [peft_tokens[a][PROMPTS.index(p)] for p, a in requests]
    assert _run(_engine(base, paths, speculate=3, speculative_model=str(draft)), requests) == plain
