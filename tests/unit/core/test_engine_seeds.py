"""Requests that give no seed: each engine draws theirs from the OS unless `EngineConfig.seed` is set, so
unseeded sampling differs from one server start to the next, and a set seed makes it repeat."""

from __future__ import annotations

import pytest

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import write_tiny_llama

SAMPLED = SamplingParams(do_sample=True, max_new_tokens=1)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def drawn_seeds(model, **config) -> list[int]:
    """The seeds a freshly started engine gives three unseeded requests."""
    engine = LLMEngine.from_config(
        EngineConfig(model_id=str(model), backend="cpu", dtype="float32", max_total_tokens=64,
                     max_batch_total_tokens=256, max_batch_prefill_tokens=64, **config)
    )  # fmt: skip
    return [result.final.seed for result in engine.generate([[5, 6, 7]] * 3, SAMPLED)]


def test_the_default_draws_request_seeds_from_the_os(tiny_llama):
    assert EngineConfig().seed is None
    first, second = drawn_seeds(tiny_llama), drawn_seeds(tiny_llama)
    assert len(set(first)) == 3
    assert set(first).isdisjoint(second), "two starts drew the same request seeds"


def test_a_set_seed_repeats_the_request_seeds(tiny_llama):
    first = drawn_seeds(tiny_llama, seed=1234)
    assert len(set(first)) == 3
    assert drawn_seeds(tiny_llama, seed=1234) == first
    assert drawn_seeds(tiny_llama, seed=1235) != first


def test_a_request_seed_is_kept(tiny_llama):
    engine = LLMEngine.from_config(
        EngineConfig(model_id=str(tiny_llama), backend="cpu", dtype="float32", max_total_tokens=64,
                     max_batch_total_tokens=256, max_batch_prefill_tokens=64)
    )  # fmt: skip
    [result] = engine.generate([[5, 6, 7]], SamplingParams(do_sample=True, max_new_tokens=1, seed=2**64 - 1))
    assert result.final.seed == 2**64 - 1
