"""Overlapped steps (`--async-scheduling`, `tgi.core.step_overlap`) through a real engine on the CPU: a
torch backend that claims its device overlaps the host (as CUDA's does) runs the same code as a GPU would,
kernels running as they are called. Each case gives the tokens of the same engine with every step waited
for, and frees every block."""

from __future__ import annotations

import gc
import logging
import weakref

import pytest

from tgi.backends.cpu.backend import CpuBackend
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.interfaces.batch import PENDING_TOKEN
from tgi.core.request import FinishReason, StepError
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.capability_conformance import CapabilityChecks
from tgi.core.testing.model import PROMPTS, backend_registry, write_tiny_llama
from tgi.core.torch.runner import TorchModelRunner

LIMITS = dict(max_total_tokens=96, max_batch_total_tokens=1024, max_batch_prefill_tokens=32, max_num_seqs=8)


class CountingRunner(TorchModelRunner):
    """Counts the decodes it was fed before their token was on the host."""

    fed_pending = 0

    def execute_async(self, batch):
        CountingRunner.fed_pending += sum(1 for s in batch.sequences if s.token_ids[-1:] == [PENDING_TOKEN])
        return super().execute_async(batch)


class OverlappingCpuBackend(CpuBackend):
    """The CPU backend, claiming a device that runs queued work while the host goes on."""

    name = "overlapping-cpu"
    overlaps_steps = True

    def create_rank_runner(self, source, config, collective):
        return CountingRunner(self, source, config, collective)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def start(tiny_llama, async_scheduling: bool = True, **settings) -> LLMEngine:
    name = OverlappingCpuBackend.name
    limits = {**LIMITS, **settings}
    config = EngineConfig(
        model_id=str(tiny_llama), backend=name, dtype="float32", async_scheduling=async_scheduling, **limits
    )
    return LLMEngine.from_config(config, registry=backend_registry(name, OverlappingCpuBackend))


@pytest.fixture(scope="module")
def engines(tiny_llama):
    return start(tiny_llama), start(tiny_llama, async_scheduling=False)


def run(engine: LLMEngine, prompts, params):
    results = engine.generate([list(p) for p in prompts], params)
    bm = engine.block_manager
    assert not engine.has_unfinished() and engine.steps.in_flight is None
    assert bm.num_free_blocks == bm.num_blocks, f"{bm.num_blocks - bm.num_free_blocks} blocks still held"
    bm.check_invariants()
    return results


def assert_same(overlapped, waited):
    assert [r.token_ids for r in overlapped] == [r.token_ids for r in waited]
    assert [r.finish_reason for r in overlapped] == [r.finish_reason for r in waited]
    assert [r.generated_text for r in overlapped] == [r.generated_text for r in waited]
    for a, b in zip(overlapped, waited, strict=True):
        for ea, eb in zip(a.events, b.events, strict=True):
            if eb.logprob is not None:
                assert ea.logprob == pytest.approx(eb.logprob, abs=1e-4)
            assert [t.id for t in ea.top_tokens] == [t.id for t in eb.top_tokens]


def test_a_torch_backend_whose_device_overlaps_the_host_overlaps_steps_unless_asked_not_to(
    engines, tiny_llama, caplog
):
    overlapped, waited = engines
    assert overlapped.runner.capabilities().async_steps and overlapped.steps.overlapping
    assert not waited.steps.overlapping  # --async-scheduling false
    config = EngineConfig(model_id=str(tiny_llama), backend="cpu", dtype="float32", **LIMITS)
    with caplog.at_level(logging.INFO, logger="tgi.core.engine"):
        cpu = LLMEngine.from_config(config, registry=backend_registry("cpu", CpuBackend))
    assert not cpu.runner.capabilities().async_steps and not cpu.steps.overlapping  # nothing to overlap
    assert "steps are not overlapped (--async-scheduling): the cpu backend's runner waits" in caplog.text


def test_greedy_sampled_and_top_tokens_equal_the_waited_engines(engines):
    overlapped, waited = engines
    params = [
        SamplingParams(max_new_tokens=12, ignore_eos=True, logprobs=True, top_n_tokens=3),
        SamplingParams(max_new_tokens=1, ignore_eos=True),
        SamplingParams(max_new_tokens=5, ignore_eos=True, do_sample=True, seed=7, temperature=0.8, top_k=20),
    ]
    before, fed = overlapped.steps.num_overlapped, CountingRunner.fed_pending
    assert_same(run(overlapped, PROMPTS, params), run(waited, PROMPTS, params))
    assert overlapped.steps.num_overlapped > before
    assert CountingRunner.fed_pending > fed  # decodes took their token on the device, not from the host


def test_a_request_that_stops_early_drops_the_step_it_ran_too_many(engines):
    overlapped, waited = engines
    greedy = SamplingParams(max_new_tokens=10, ignore_eos=True)
    [reference] = run(waited, PROMPTS[:1], [greedy])
    stop_at = reference.token_ids[3]  # the request ends at its 4th token (or earlier, if it came before)
    stopping = SamplingParams(max_new_tokens=10, ignore_eos=True, stop_token_ids=(stop_at,))
    params = [stopping, greedy, SamplingParams(max_new_tokens=10, ignore_eos=True, stop=("zz",))]
    overlapped_results = run(overlapped, PROMPTS, params)
    assert_same(overlapped_results, run(waited, PROMPTS, params))
    first = overlapped_results[0]
    assert first.finish_reason in (FinishReason.STOP, FinishReason.EOS)
    assert first.token_ids[-1] == stop_at and len(first.token_ids) <= 4
    assert [e.index for e in first.events] == list(range(len(first.token_ids)))  # no token after the stop


def test_steps_with_a_penalty_are_waited_for_and_agree(engines):
    overlapped, waited = engines
    params = [
        SamplingParams(max_new_tokens=8, ignore_eos=True, repetition_penalty=1.5),
        SamplingParams(max_new_tokens=8, ignore_eos=True),
        SamplingParams(max_new_tokens=8, ignore_eos=True, frequency_penalty=0.5),
    ]
    before = overlapped.steps.num_overlapped
    assert_same(run(overlapped, PROMPTS, params), run(waited, PROMPTS, params))
    # every step held a request whose sampling reads its history: none was left in flight
    assert overlapped.steps.num_overlapped == before


def test_steps_of_a_request_with_a_prediction_are_waited_for_and_guessed_for(engines):
    """Its next guesses follow the token a step draws (`Drafts.follows_tokens`): never left in flight."""
    overlapped, waited = engines
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    [reference] = run(waited, PROMPTS[2:], [params])  # its prompt and the other's fit one step

    def predicted(engine: LLMEngine) -> tuple[list, list]:
        request = engine.validate(list(PROMPTS[2]), params, prediction=reference.token_ids)
        beside = SamplingParams(max_new_tokens=2, ignore_eos=True)  # ends with it: no step without it
        ids = [engine.add_validated_request(request), engine.add_request(list(PROMPTS[1]), beside)]
        events = {i: [] for i in ids}
        while engine.has_unfinished():
            for event in engine.step():
                events[event.request_id].append(event)
        last = events[ids[0]][-1]
        counts = (last.num_accepted_prediction_tokens, last.num_rejected_prediction_tokens)
        return [[e.token_id for e in events[i]] for i in ids], counts

    before, guessed = overlapped.steps.num_overlapped, overlapped.scheduler.num_draft_tokens
    assert predicted(overlapped) == predicted(waited)
    assert overlapped.steps.num_overlapped == before and overlapped.scheduler.num_draft_tokens > guessed


def test_preemption_under_a_small_cache_keeps_the_tokens(tiny_llama):
    small = dict(max_total_tokens=64, max_batch_total_tokens=96, max_batch_prefill_tokens=32, block_size=16)
    overlapped, waited = start(tiny_llama, **small), start(tiny_llama, async_scheduling=False, **small)
    prompts = [PROMPTS[1], PROMPTS[2], PROMPTS[0][:20], PROMPTS[1][::-1]]
    params = SamplingParams(max_new_tokens=30, ignore_eos=True)
    assert_same(run(overlapped, prompts, params), run(waited, prompts, params))
    assert overlapped.scheduler.num_preemptions > 0 and overlapped.steps.num_overlapped > 0


def test_aborting_with_a_step_in_flight_frees_every_block(tiny_llama):
    engine = start(tiny_llama, prefix_caching=False)
    ids = [engine.add_request(list(p), SamplingParams(max_new_tokens=40, ignore_eos=True)) for p in PROMPTS]
    for _ in range(6):
        engine.step()
    assert engine.steps.in_flight is not None
    engine.abort(ids[0])  # its last step is still running: its blocks go now, its token is dropped
    events = []
    for _ in range(3):
        events += engine.step()
    assert events and ids[0] not in {e.request_id for e in events}  # not even the in-flight step's token
    assert sorted(engine.abort_all()) == sorted(ids[1:])
    assert engine.steps.in_flight is None and not engine.has_unfinished()
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


class TestOverlappedCapabilities(CapabilityChecks):
    """Every capability check of the conformance suite (grammar masks, prompt logprobs, LoRA at run time,
    deterministic mode, overlapped steps) on a backend whose steps overlap: the ones that need tokens on the
    host are waited for, the others overlap, and all give what they give without overlap."""

    def make_backend(self):
        return OverlappingCpuBackend()


class FailingRunner(TorchModelRunner):
    """The step started after `fail_next` is set fails when its result is read (as a device error surfaces
    at the copy back)."""

    fail_next = False

    def execute_async(self, batch):
        handle = super().execute_async(batch)
        if self.fail_next:
            self.fail_next = False
            handle.result = lambda: (_ for _ in ()).throw(RuntimeError("device fault"))
        return handle


class FailingBackend(OverlappingCpuBackend):
    name = "failing-overlapping-cpu"

    def create_rank_runner(self, source, config, collective):
        return FailingRunner(self, source, config, collective)


def test_a_step_that_fails_while_the_next_runs_fails_the_requests_of_both(tiny_llama):
    config = EngineConfig(model_id=str(tiny_llama), backend=FailingBackend.name, dtype="float32", **LIMITS)
    engine = LLMEngine.from_config(config, registry=backend_registry(FailingBackend.name, FailingBackend))
    first = engine.add_request(list(PROMPTS[1]), SamplingParams(max_new_tokens=20, ignore_eos=True))
    for _ in range(3):
        engine.step()
    second = engine.add_request(list(PROMPTS[2]), SamplingParams(max_new_tokens=20, ignore_eos=True))
    engine.runner.fail_next = True
    engine.step()  # the failing step starts (the second request's prefill, the first's decode)
    with pytest.raises(StepError) as failed:
        engine.step()  # the next starts, and the failing one fails as it is settled
    assert set(failed.value.request_ids) == {first, second} and engine.steps.in_flight is None
    for request_id in failed.value.request_ids:  # what AsyncEngine does with a failed step's requests
        engine.abort(request_id)
    assert (
        not engine.has_unfinished()
        and engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    )


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_an_engine_is_freed_by_reference_counting_alone(tiny_llama, async_scheduling):
    # the server freezes its start-up objects (`gc.freeze`): a cycle through the engine would keep a
    # swapped-out model alive (tests/integration/test_model_swap_release.py runs the server's path)
    engine = start(tiny_llama, async_scheduling=async_scheduling)
    run(engine, PROMPTS[:2], [SamplingParams(max_new_tokens=3, ignore_eos=True)] * 2)
    gone = weakref.ref(engine)
    gc.disable()
    try:
        del engine
        assert gone() is None, [type(r).__name__ for r in gc.get_referrers(gone())]
    finally:
        gc.enable()
