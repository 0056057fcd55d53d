"""The conformance suite's checks can fail: a defect in code that a backend shares with core (the torch
sampler's processors, core's model code) is caught, because each check compares with a reference written
apart from that code (a plainly written sampler, `transformers`), never with a second copy of it."""

from __future__ import annotations

import pytest

from tgi.core.models import llama
from tgi.core.sampling import processors as P
from tgi.core.testing.model import write_tiny_llama
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
    monkeypatch.setattr(P, "apply_top_k_top_p", lambda logits, top_k, top_p, max_k=None: logits)
    with pytest.raises(AssertionError):
        suite.test_sampler_seeded_matches_reference(backend)


def test_a_sampler_without_repetition_penalty_fails(suite, backend, monkeypatch):
    monkeypatch.setattr(P, "apply_repetition_penalty", lambda logits, seen, penalty: logits)
    with pytest.raises(AssertionError):
        suite.test_sampler_greedy_matches_reference(backend)


def test_a_model_with_wrong_rotary_frequencies_fails(suite, backend, monkeypatch, tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "tgi-conformance-tiny-llama"  # the suite's own checkpoint
    if not (path / "config.json").exists():
        write_tiny_llama(path)
    real = llama.compute_inv_freq

    def off(config, device=None):
        inv_freq, scaling = real(config, device)
        return inv_freq * 1.5, scaling

    monkeypatch.setattr(llama, "compute_inv_freq", off)
    with pytest.raises(AssertionError):
        suite.test_greedy_generation_matches_transformers(backend, path)
