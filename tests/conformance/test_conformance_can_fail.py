"""The conformance suite's checks can fail: a defect in code that a backend shares with core (the torch
sampler's processors, core's model code) is caught, because each check compares with a reference written
apart from that code (a plainly written sampler, `transformers`), never with a second copy of it."""

from __future__ import annotations

import pytest

from tgi.core.interfaces import RunnerConstraints
from tgi.core.models import rotary
from tgi.core.sampling import processors as P
from tgi.core.scheduler import Scheduler
from tgi.core.testing.model import transformers_greedy, write_tiny_llama
from tgi.core.torch.runner import TorchModelRunner
from tgi.core.torch.testing import TorchBackendConformance


class CpuSuite(TorchBackendConformance):  # not collected: its checks run below, on purpose broken
    backend_name = "cpu"


@pytest.fixture
def suite() -> CpuSuite:
    return CpuSuite()


@pytest.fixture
def backend(suite):
    return suite.make_backend()


def test_the_reference_backend_is_found_through_the_plugin_host(backend):
    assert backend.name == "cpu"


def test_a_sampler_with_other_noise_fails(suite, backend, monkeypatch):
    real = P.hash_uniform
    monkeypatch.setattr(P, "hash_uniform", lambda seeds, steps, vocab: real(seeds, steps + 1, vocab))
    with pytest.raises(AssertionError):
        suite.test_sampler_seeded_matches_reference(backend)


def test_a_sampler_without_top_k_top_p_fails(suite, backend, monkeypatch):
    # the sampler truncates through `top_k_top_p_candidates` (`apply_top_k_top_p` is its in-place form)
    monkeypatch.setattr(P, "top_k_top_p_candidates", lambda logits, top_k, top_p, max_k=None: (logits, None))
    with pytest.raises(AssertionError):
        suite.test_sampler_seeded_matches_reference(backend)


def test_a_sampler_without_repetition_penalty_fails(suite, backend, monkeypatch):
    monkeypatch.setattr(P, "apply_repetition_penalty", lambda logits, seen, penalty: logits)
    with pytest.raises(AssertionError):
        suite.test_sampler_greedy_matches_reference(backend)


def test_a_sampler_without_the_watermark_fails(suite, backend, monkeypatch):
    monkeypatch.setattr(P, "apply_watermark", lambda logits, prev_tokens, gamma, delta: logits)
    with pytest.raises(AssertionError):
        suite.test_sampler_watermark_matches_reference(backend)


def test_a_model_with_wrong_rotary_frequencies_fails(suite, backend, monkeypatch, tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "tgi-conformance-tiny-llama"  # the suite's own checkpoint
    if not (path / "config.json").exists():
        write_tiny_llama(path)
    real = rotary.compute_inv_freq

    def off(config, device=None):
        inv_freq, scaling = real(config, device)
        return inv_freq * 1.5, scaling

    reference = transformers_greedy(path)  # before the defect: transformers' own model
    monkeypatch.setattr(rotary, "compute_inv_freq", off)  # every native model's rotary comes from here
    with pytest.raises(AssertionError):
        suite.test_greedy_generation_matches_transformers(backend, path, _checked(), reference)


def _checked() -> dict:
    return {"count": 0, "violations": []}


class BatchOfOne(TorchModelRunner):
    def constraints(self) -> RunnerConstraints:
        return RunnerConstraints(max_batch_size=1)


def test_a_scheduler_that_ignores_the_runner_constraints_fails(suite, backend, monkeypatch, tmp_path):
    path = write_tiny_llama(tmp_path / "tiny-llama")
    monkeypatch.setattr(backend, "create_rank_runner", lambda *args: BatchOfOne(backend, *args))
    suite.test_runner_constraints_are_honoured(backend, path, _checked())  # honoured: batches of one
    real = Scheduler.from_config
    monkeypatch.setattr(
        Scheduler, "from_config", classmethod(lambda cls, config, bm, constraints: real(config, bm, None))
    )
    with pytest.raises(AssertionError, match="sequences > max_batch_size 1"):
        suite.test_runner_constraints_are_honoured(backend, path, _checked())


class PaddedRows(TorchModelRunner):
    """Prefill steps as padded rows (2 or 4) whose padded area is at most 32 tokens."""

    def constraints(self) -> RunnerConstraints:
        return RunnerConstraints(prefill_batch_buckets=(2, 4), max_padded_prefill_tokens=32)


def test_a_scheduler_that_ignores_the_padded_prefill_area_fails(suite, backend, monkeypatch, tmp_path):
    path = write_tiny_llama(tmp_path / "tiny-llama")
    monkeypatch.setattr(backend, "create_rank_runner", lambda *args: PaddedRows(backend, *args))
    suite.test_runner_constraints_are_honoured(backend, path, _checked())  # honoured
    real = Scheduler.from_config
    monkeypatch.setattr(
        Scheduler, "from_config", classmethod(lambda cls, config, bm, constraints: real(config, bm, None))
    )
    with pytest.raises(AssertionError, match="max_padded_prefill_tokens 32"):
        suite.test_runner_constraints_are_honoured(backend, path, _checked())


def test_an_abort_that_keeps_the_blocks_fails(suite, backend, monkeypatch, tmp_path):
    path = write_tiny_llama(tmp_path / "tiny-llama")
    reference = transformers_greedy(path)
    real = Scheduler.abort

    def abort_keeping_blocks(self, request_id):
        seq = self._seqs.get(request_id)
        table = list(seq.block_table) if seq is not None else []
        found = real(self, request_id)
        if table:  # take the blocks back out of the free list, as a leak would leave them
            for block in table:
                self.block_manager._free.remove(block)
                self.block_manager._ref_counts[block] = 1
        return found

    monkeypatch.setattr(Scheduler, "abort", abort_keeping_blocks)
    with pytest.raises(AssertionError, match="blocks still held"):
        suite.test_cancellation_frees_blocks_and_spares_the_others(backend, path, _checked(), reference)
