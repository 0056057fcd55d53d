"""Perplexity as llama-perplexity computes it (windows of n_ctx, BOS at each window's start where the vocabulary
adds one, the second half scored), on the real engine, against exp(mean NLL) from transformers' float32
logits of the same windows."""

from __future__ import annotations

import math
import random

import pytest

from tgi.benchmarks.perplexity import (
    engine_perplexity,
    from_logprobs,
    perplexity_engine_config,
    windows,
)
from tgi.core.testing.model import VOCAB_SIZE, write_tiny_llama


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("ppl-tiny-llama"))


def test_windows_are_disjoint_score_their_second_half_and_start_with_bos():
    ids = list(range(100, 150))  # 50 tokens: 3 windows of 16, the last 2 tokens dropped
    ws = windows(ids, 16, bos_id=1)
    assert [w.token_ids[1:] for w in ws] == [ids[i * 16 + 1 : (i + 1) * 16] for i in range(3)]
    assert all(w.token_ids[0] == 1 and w.first_scored == 9 for w in ws)  # positions 9..15: 7 tokens
    assert [w.token_ids for w in windows(ids, 16, None)][1][0] == ids[16]  # no BOS: the text's own token
    with pytest.raises(ValueError, match="at least 64 are needed for a context of 32"):
        windows(ids, 32, None)


def test_from_logprobs_is_exp_of_the_mean_nll():
    result = from_logprobs([[-1.0, -2.0], [-3.0]], n_ctx=4)
    assert result.num_scored == 3 and result.num_windows == 2
    assert result.perplexity == pytest.approx(math.exp(2.0))


def _transformers_perplexity(model_path, ids, n_ctx, bos_id) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    nll, count = 0.0, 0
    for w in windows(ids, n_ctx, bos_id):
        with torch.no_grad():
            logits = model(torch.tensor([w.token_ids])).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        for pos in range(w.first_scored, n_ctx):  # token at pos, by the logits of pos - 1
            nll -= float(logprobs[pos - 1, w.token_ids[pos]])
            count += 1
    return math.exp(nll / count)


@pytest.mark.parametrize("bos_id", [None, 1])
def test_engine_perplexity_equals_transformers_float32(tiny_llama, bos_id):
    from tgi.core.engine import LLMEngine

    rng = random.Random(3)
    ids = [rng.randrange(3, VOCAB_SIZE) for _ in range(150)]  # 3 windows of 48, 6 tokens dropped
    engine = LLMEngine.from_config(perplexity_engine_config(str(tiny_llama), 48, "float32", None))
    try:
        ours = engine_perplexity(engine, ids, 48, bos_id)
    finally:
        engine.close()
    assert ours.num_windows == 3 and ours.num_scored == 3 * 23
    assert ours.perplexity == pytest.approx(_transformers_perplexity(tiny_llama, ids, 48, bos_id), rel=1e-4)
