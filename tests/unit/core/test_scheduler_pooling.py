"""Pooling requests in the scheduler (no torch): prefill-only sequences batched with generations under the
same budget and blocks, each prompt whole in one chunk, never sampled, and their blocks freed when the engine
ends them after their step. And a runner that cannot pool refused at start, naming why."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tgi.core.block_manager import BlockManager
from tgi.core.config import ConfigError, EngineConfig
from tgi.core.engine_startup import _check_loaded
from tgi.core.interfaces import ModelInfo, PoolingSpec, RunnerCapabilities
from tgi.core.interfaces.batch import StepOutput
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.request import FinishReason
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler
from tgi.core.sequence import Sequence

ONE = SamplingParams(max_new_tokens=1)


def _scheduler(budget: int = 16) -> Scheduler:
    return Scheduler(BlockManager(16, 4), 8, budget, RunnerConstraints(chunked_prefill=False))


def test_pooling_prompts_run_whole_in_one_step_and_are_never_sampled():
    s = _scheduler()
    s.add(Sequence("gen", [1, 2, 3], SamplingParams(max_new_tokens=4)))
    s.add(Sequence("p1", [4, 5, 6, 7, 8], ONE, pooling=True))
    s.add(Sequence("p2", [9] * 9, ONE, pooling=True))  # does not fit the budget left: waits, never cut
    batch = s.schedule()
    assert [(q.request_id, q.num_tokens, q.sample, q.pool) for q in batch.sequences] == [
        ("gen", 3, True, False),
        ("p1", 5, False, True),
    ]
    new = s.update(batch, StepOutput(["gen"], [42], [0.0]))
    assert [q.request_id for q in new] == ["gen"]  # the pooled one got no token
    s.finish("p1", FinishReason.LENGTH)  # the engine ends it with its vector
    batch = s.schedule()
    # prefills first, then decodes (the batch's layout)
    assert [(q.request_id, q.num_tokens, q.pool) for q in batch.sequences] == [
        ("p2", 9, True),
        ("gen", 1, False),
    ]


def test_a_pooled_prompt_longer_than_a_step_is_refused():
    with pytest.raises(ValueError, match="cannot chunk"):
        _scheduler(budget=8).add(Sequence("p", [1] * 9, ONE, pooling=True))


@dataclass
class _Runner:
    pooling: bool

    def capabilities(self) -> RunnerCapabilities:
        return RunnerCapabilities(pooling=self.pooling)


def test_a_runner_that_cannot_pool_is_refused_at_start():
    spec = PoolingSpec(mode="mean", normalize=True, dimension=8)
    config = EngineConfig(model_id="m", pooling=spec)
    info = ModelInfo("BertModel", 100, 128, (), "float32", 1)
    with pytest.raises(ConfigError, match="the neuron backend's runner cannot pool"):
        _check_loaded(config, info, "neuron", _Runner(pooling=False))
    _check_loaded(config, info, "cpu", _Runner(pooling=True))
