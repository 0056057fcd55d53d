"""Multi-LoRA on the real default model (SmolLM2-135M-Instruct, GGUF Q4_1, float32 on the CPU backend, its
block kernels computing the base products): three adapters made with `peft` on transformers' dequantized
model (random non-zero B), mixed with the base model in one batch, each request's greedy tokens equal to
transformers + peft's for its adapter.

transformers + peft check the engine's tokens teacher forced: one forward pass over each prompt and the
engine's tokens, whose argmax at every position must be the engine's next token. That is the condition for
peft's own greedy decoding to produce exactly those tokens, at one forward pass per request instead of one
per token (a forward pass of this model reads all its float32 weights: ~0.5 CPU s here, whatever the length)."""

from __future__ import annotations

import pytest

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.lora import write_random_lora

pytestmark = pytest.mark.slow

N = 10
ADAPTERS = {
    "all": dict(r=8, lora_alpha=16, std=0.05, seed=1),
    "attn": dict(r=4, lora_alpha=8, target_modules=("q_proj", "v_proj"), use_rslora=True, std=0.08, seed=2),
    "mlp": dict(r=16, lora_alpha=16, target_modules=("up_proj", "down_proj"), std=0.05, seed=3),
}


def test_mixed_adapters_equal_peft_on_the_default_model(tmp_path, prompts, hf_model):
    # transformers' dequantized model, loaded once for the session (conftest.py): the adapters are made on it
    # and each reference is computed with one of them put on it and taken off again
    paths = {name: write_random_lora(tmp_path / name, hf_model, **kw) for name, kw in ADAPTERS.items()}
    config = EngineConfig(
        dtype="float32", max_batch_total_tokens=4096, max_total_tokens=1024, max_batch_prefill_tokens=256,
        max_num_seqs=16, lora_adapters=tuple((n, str(p)) for n, p in paths.items()),
    )  # fmt: skip
    engine = LLMEngine.from_config(config)
    chosen = [prompts[name] for name in ("short", "code", "french")]
    names = [None, *ADAPTERS]
    requests = [(p, a) for p in chosen for a in names]
    results = engine.generate(
        [list(p) for p, _ in requests],
        [SamplingParams(max_new_tokens=N, ignore_eos=True, adapter_id=a) for _, a in requests],
    )
    got = {(chosen.index(p), a): r.token_ids for r, (p, a) in zip(results, requests, strict=True)}
    for a in names:
        sequences = [chosen[i] + got[i, a] for i in range(len(chosen))]
        want = peft_argmax(hf_model, None if a is None else paths[a], sequences)
        for i, prompt in enumerate(chosen):
            assert len(got[i, a]) == N
            # peft's greedy token after the prompt and the engine's tokens before each position
            assert want[i][len(prompt) - 1 : -1] == got[i, a], f"adapter {a}, prompt {i}"
    for a in ADAPTERS:
        assert [got[i, a] for i in range(len(chosen))] != [got[i, None] for i in range(len(chosen))], (
            f"adapter {a} changes nothing: the comparison would be vacuous"
        )


def peft_argmax(model, adapter, sequences: list[list[int]]) -> list[list[int]]:
    """The argmax of transformers' float32 model with the PEFT adapter at `adapter` (None: the base model) at
    every position of each sequence, one forward pass each; the adapter's layers are removed again."""
    import torch
    from peft import PeftModel

    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter))
    try:
        with torch.no_grad():
            return [model(input_ids=torch.tensor([s])).logits[0].argmax(-1).tolist() for s in sequences]
    finally:
        if adapter is not None:
            model.unload()  # the session's model without the LoRA layers PEFT injected
