"""Medusa heads in TGI's layout on a tiny random Llama: the runner's guesses equal a plain-torch reference of
the heads on transformers' hidden states, and guessing changes no token."""

from __future__ import annotations

import pytest
import torch
from medusa_heads import HEADS, write_medusa

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.speculative import MedusaProposer
from tgi.core.testing.model import PROMPTS, backend_registry, write_tiny_llama


def reference_guesses(base, tensors, prompt: list[int]) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    with torch.inference_mode():
        hidden = model.model(torch.tensor([prompt])).last_hidden_state[0, -1]  # after the final norm
        out = []
        for i in range(HEADS):
            x = hidden + torch.nn.functional.silu(
                tensors[f"{i}.0.linear.weight"] @ hidden + tensors[f"{i}.0.linear.bias"]
            )
            proj = tensors.get(f"{i}.1.weight", model.lm_head.weight)
            out.append(int((proj @ x).argmax()))
    return out


@pytest.mark.parametrize("own_projection", [True, False])
def test_medusa_guesses_match_the_reference_and_change_no_token(tmp_path, own_projection):
    from tgi.backends.cpu.backend import CpuBackend

    base = write_tiny_llama(tmp_path / "base")
    tensors = write_medusa(tmp_path / "medusa", base, own_projection)
    registry = backend_registry("cpu", CpuBackend)

    def engine(speculate: int, model_id) -> LLMEngine:
        config = EngineConfig(
            model_id=str(model_id), backend="cpu", dtype="float32", speculate=speculate,
            max_total_tokens=128, max_batch_total_tokens=1024, max_batch_prefill_tokens=64, max_num_seqs=4,
        )  # fmt: skip
        return LLMEngine.from_config(config, registry=registry)

    medusa = engine(2, tmp_path / "medusa")
    assert isinstance(medusa.proposer, MedusaProposer) and medusa.runner.capabilities().medusa_heads == HEADS
    prompt = list(PROMPTS[1])
    rid = medusa.add_request(prompt, SamplingParams(max_new_tokens=12, ignore_eos=True))
    medusa.step()  # the prompt: the heads guess at its last position
    _, guesses = medusa.proposer._guesses[rid]
    assert guesses == reference_guesses(base, tensors, prompt)

    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    plain = [r.token_ids for r in engine(0, base).generate([list(p) for p in PROMPTS], params)]
    fresh = engine(2, tmp_path / "medusa")
    assert [r.token_ids for r in fresh.generate([list(p) for p in PROMPTS], params)] == plain
    assert fresh.scheduler.num_draft_tokens > 0


def test_sampled_tokens_are_the_same_draws_for_many_seeds(tmp_path):
    """Many seeds on a tiny model, n-gram guesses on a repetitive prompt: every seed draws the same tokens
    with and without speculation (so the sampled distribution is the same, not only close)."""
    from tgi.backends.cpu.backend import CpuBackend

    base = write_tiny_llama(tmp_path / "base")
    registry = backend_registry("cpu", CpuBackend)
    prompt = [5, 6, 7, 8] * 6
    results = []
    for speculate in (0, 4):
        config = EngineConfig(
            model_id=str(base), backend="cpu", dtype="float32", speculate=speculate,
            max_total_tokens=128, max_batch_total_tokens=4096, max_batch_prefill_tokens=512, max_num_seqs=64,
        )  # fmt: skip
        engine = LLMEngine.from_config(config, registry=registry)
        params = [
            SamplingParams(max_new_tokens=24, do_sample=True, temperature=0.3, seed=s) for s in range(64)
        ]
        rids = [engine.add_request(list(prompt), p) for p in params]
        tokens = {r: [] for r in rids}
        while engine.has_unfinished():
            for event in engine.step():
                tokens[event.request_id].append(event.token_id)
        results.append([tokens[r] for r in rids])
        if speculate:
            assert engine.scheduler.num_accepted_draft_tokens > 0
    assert results[0] == results[1]
    assert len({tuple(t) for t in results[0]}) > 8, "the seeds must give different draws"
