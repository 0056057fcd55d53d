"""A request's reported alternatives (`top_n_tokens`) through a real engine on a tiny random Llama: the best
tokens before any truncation (a top-k, XTC), and never a token the step could not take (not allowed,
banned), whose logprob would be -inf."""

from __future__ import annotations

import math

import pytest

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import write_tiny_llama


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    model = write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    return LLMEngine.from_config(
        EngineConfig(model_id=str(model), backend="cpu", dtype="float32", max_total_tokens=64,
                     max_batch_total_tokens=256, max_batch_prefill_tokens=64)
    )  # fmt: skip


def test_alternatives_are_the_best_before_truncation(engine):
    params = SamplingParams(
        do_sample=True, seed=1, top_k=1, top_n_tokens=4, max_new_tokens=4, ignore_eos=True
    )
    [result] = engine.generate([[5, 6, 7]], params)
    for event in result.events:
        assert len(event.top_tokens) == 4 and all(math.isfinite(t.logprob) for t in event.top_tokens)
        assert event.top_tokens[0].id == event.token_id  # top-k 1: the best one is drawn


def test_a_token_the_step_could_not_take_is_no_alternative(engine):
    allowed = (11, 12, 13)
    params = SamplingParams(allowed_token_ids=allowed, top_n_tokens=5, max_new_tokens=4, ignore_eos=True)
    [result] = engine.generate([[5, 6, 7]], params)
    for event in result.events:
        assert event.token_id in allowed
        assert {t.id for t in event.top_tokens} <= set(allowed) and len(event.top_tokens) == 3
        assert all(math.isfinite(t.logprob) for t in event.top_tokens)
